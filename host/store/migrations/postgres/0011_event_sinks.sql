-- Where each event sink (the NATS publisher) is in the event log: the
-- number of the last event it published.
CREATE TABLE event_sinks (
    name   TEXT   NOT NULL PRIMARY KEY,
    cursor BIGINT NOT NULL
);
