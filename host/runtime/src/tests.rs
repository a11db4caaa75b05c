use super::*;

#[test]
fn header_checks_name_the_problem() {
    assert!(matches!(check_header(b"hello world"), Err(Error::NotWasm(_))));
    assert!(matches!(check_header(b"\0asm\x01\0\0\0"), Err(Error::CoreModule)));
    assert!(check_header(b"\0asm\x0d\0\x01\0").is_ok());
}

#[test]
fn info_validation() {
    let info = |name: &str, version: &str, schema: Option<&str>| bindings::PluginInfo {
        name: name.into(),
        version: version.into(),
        description: String::new(),
        params_schema: schema.map(String::from),
    };
    assert!(validate_info(info("echo", "0.1.0", None)).is_ok());
    assert!(validate_info(info("Echo", "0.1.0", None)).is_err());
    assert!(validate_info(info("echo", "1.0", None)).is_err());
    assert!(validate_info(info("echo", "1.0.0-rc.1", Some("{\"type\":\"object\"}"))).is_ok());
    assert!(validate_info(info("echo", "1.0.0", Some("[1]"))).is_err());
}

#[test]
fn the_open_file_limit_is_raised_as_far_as_the_hard_limit_allows() {
    let read = || {
        let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit writes into the valid struct it is given.
        #[allow(unsafe_code)]
        let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
        assert_eq!(rc, 0);
        (limit.rlim_cur, limit.rlim_max)
    };
    let need = 2 * 16 + NODE_DESCRIPTORS;
    let result = reserve_descriptors(2, 16);
    let (soft, hard) = read();
    assert!(soft >= need.min(hard), "soft {soft}, hard {hard}, need {need}");
    match result {
        Ok(have) => assert!(have >= need),
        Err((have, wanted)) => assert_eq!((have, wanted), (hard, need), "short only when the hard limit is"),
    }
    // Far more than any hard limit: reported short, with both numbers.
    let (have, wanted) = reserve_descriptors(u32::MAX, usize::MAX).unwrap_err();
    assert_eq!((have, wanted), (hard, u64::MAX));
}

#[test]
fn every_field_of_plugin_info_has_a_limit_that_the_error_names() {
    let message = |info: bindings::PluginInfo| match validate_info(info) {
        Err(Error::BadInfo(message)) => message,
        other => panic!("accepted or refused for another reason: {other:?}"),
    };
    let base = || bindings::PluginInfo {
        name: "echo".into(),
        version: "1.0.0".into(),
        description: "fine".into(),
        params_schema: None,
    };
    let long_version = format!("1.0.0-{}", "a".repeat(100));
    let m = message(bindings::PluginInfo { version: long_version, ..base() });
    assert!(m.contains("version") && m.contains("64"), "{m}");
    let m = message(bindings::PluginInfo { description: "d".repeat(30 << 20), ..base() });
    assert!(m.contains("description") && m.contains("4096"), "{m}");
    let big = format!("{{\"description\": \"{}\"}}", "x".repeat(70 << 10));
    let m = message(bindings::PluginInfo { params_schema: Some(big), ..base() });
    assert!(m.contains("params schema") && m.contains("65536"), "{m}");
    let deep = format!("{}{}", "[".repeat(100), "]".repeat(100));
    let m = message(bindings::PluginInfo { params_schema: Some(format!("{{\"a\": {deep}}}")), ..base() });
    assert!(m.contains("params schema") && m.contains("64 levels"), "{m}");
    let at_limits = bindings::PluginInfo {
        version: format!("1.0.0-{}", "a".repeat(58)),
        description: "d".repeat(4 << 10),
        ..base()
    };
    assert!(validate_info(at_limits).is_ok());
}
