//! A valid component of another world: it exports `run`, not dagr:plugin/task.

wit_bindgen::generate!({
    inline: "
        package test:other@1.0.0;
        world other {
            export run: func() -> string;
        }
    ",
});

struct Other;

impl Guest for Other {
    fn run() -> String {
        "I am not a dagr plugin".into()
    }
}

export!(Other);
