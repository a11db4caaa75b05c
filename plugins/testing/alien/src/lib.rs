//! A component that imports an interface dagr does not provide.

wit_bindgen::generate!({
    inline: "
        package test:alien@1.0.0;
        interface clock {
            now: func() -> u64;
        }
        world alien {
            import clock;
            export run: func() -> string;
        }
    ",
});

struct Alien;

impl Guest for Alien {
    fn run() -> String {
        test::alien::clock::now().to_string()
    }
}

export!(Alien);
