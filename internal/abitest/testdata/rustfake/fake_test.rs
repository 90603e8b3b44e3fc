//! Tests of the Rust SDK's fake host (abi/rust/src/fake.rs), built natively with rustc --test
//! against the SDK by TestRustFakeHost. The handler below does what the plugin's name asks,
//! and each test checks what the fake made of it.

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::rc::Rc;

use wasmhost::fake::{
    Fake, KV_BYTES_PER_HANDLER, KV_KEYS_PER_HANDLER, LOG_BYTES_PER_CALL, LOG_LINES_PER_CALL,
    MAX_KV_ENTRIES, NO_REASON,
};
use wasmhost::fake::{PLUGIN_CALLS_PER_CALL, PUBLISH_KEYS};
use wasmhost::{kv, Error, Handler, HostError, Level, Plugin};
use wasmhost::{
    CODE_BAD_REQUEST, CODE_DENIED, CODE_FAILED, CODE_TOO_LARGE, MAX_KEY_BYTES, MAX_LOG_LINE_BYTES,
    MAX_VALUE_BYTES,
};

struct Test;

/// expect fails the call, naming what, when got is not want.
fn expect<T: PartialEq + std::fmt::Debug>(what: &str, got: T, want: T) -> Result<(), Error> {
    if got != want {
        return Err(Error::fail(format!(
            "{}: got {:?}, want {:?}",
            what, got, want
        )));
    }
    Ok(())
}

/// code is the code of a host function's result, 0 for Ok.
fn code<T>(r: Result<T, HostError>) -> i32 {
    r.err().map_or(0, |e| e.code)
}

impl Handler for Test {
    fn validate(&self, p: &Plugin) -> Result<(), Error> {
        match p.name.as_str() {
            "publish" => expect(
                "publish in validate",
                code(wasmhost::publish("k", "v")),
                CODE_DENIED,
            ),
            "reject" => Err(Error::reject("not this one")),
            "fail-silently" => Err(Error::fail("")),
            "long-reason" => Err(Error::reject("r".repeat(5000))),
            "request" => expect(
                "the request",
                p.clone(),
                Plugin {
                    socket: "/s.sock".into(),
                    plugin_type: "t".into(),
                    name: "request".into(),
                    endpoint: "/e.sock".into(),
                    versions: vec!["v2".into(), "".into(), "v1".into()],
                },
            ),
            "log" => {
                wasmhost::log(Level::Debug, "d");
                wasmhost::log(Level::Warn, "w");
                wasmhost::log(Level::Error, &"é".repeat(MAX_LOG_LINE_BYTES)); // cut between characters
                Ok(())
            }
            "log-lines" => {
                for _ in 0..LOG_LINES_PER_CALL {
                    wasmhost::log(Level::Info, "line");
                }
                wasmhost::log(Level::Info, "one line too many");
                kv::set("after", b"the call went on")?;
                Ok(())
            }
            "log-bytes" => {
                let line = "b".repeat(MAX_LOG_LINE_BYTES);
                for _ in 0..LOG_BYTES_PER_CALL / MAX_LOG_LINE_BYTES {
                    wasmhost::log(Level::Info, &line);
                }
                wasmhost::log(Level::Info, "b");
                kv::set("after", b"the call went on")?;
                Ok(())
            }
            "log-most" => {
                for _ in 0..LOG_LINES_PER_CALL {
                    wasmhost::log(Level::Info, "line");
                }
                Ok(())
            }
            // The plugin name of the store its type has.
            "read" => match kv::get("plugin")? {
                Some(v) => Err(Error::reject(String::from_utf8_lossy(&v).into_owned())),
                None => Err(Error::reject("none")),
            },
            "panic" => panic!("the handler panicked"),
            _ => Ok(()),
        }
    }

    fn register(&self, p: &Plugin) -> Result<(), Error> {
        match p.name.as_str() {
            "kv" => {
                expect("kv::get of a missing key", kv::get("a")?, None)?;
                kv::set("a", b"1")?;
                expect("kv::get", kv::get("a")?, Some(b"1".to_vec()))?;
                let big = vec![b'x'; MAX_VALUE_BYTES + 1];
                kv::set("big", &big[..1000])?; // over the SDK's first read buffer
                expect(
                    "kv::get of 1000 bytes",
                    kv::get("big")?,
                    Some(big[..1000].to_vec()),
                )?;
                expect(
                    "compare_and_set of the value there",
                    kv::compare_and_set("a", Some(b"1"), Some(b"2"))?,
                    true,
                )?;
                expect(
                    "compare_and_set of a stale value",
                    kv::compare_and_set("a", Some(b"1"), Some(b"3"))?,
                    false,
                )?;
                expect(
                    "compare_and_set of an absent key",
                    kv::compare_and_set("b", None, Some(b"1"))?,
                    true,
                )?;
                expect(
                    "compare_and_set expecting absent",
                    kv::compare_and_set("b", None, Some(b"2"))?,
                    false,
                )?;
                expect(
                    "compare_and_set deleting",
                    kv::compare_and_set("b", Some(b"1"), None)?,
                    true,
                )?;
                expect(
                    "kv::set of an empty key",
                    code(kv::set("", b"x")),
                    CODE_BAD_REQUEST,
                )?;
                expect(
                    "kv::set of a key over the limit",
                    code(kv::set(&"k".repeat(MAX_KEY_BYTES + 1), b"x")),
                    CODE_TOO_LARGE,
                )?;
                expect(
                    "kv::set of a key at the limit",
                    code(kv::set(&"k".repeat(MAX_KEY_BYTES), b"x")),
                    0,
                )?;
                expect(
                    "kv::set of a value over the limit",
                    code(kv::set("c", &big)),
                    CODE_TOO_LARGE,
                )?;
                expect(
                    "kv::set of a value at the limit",
                    code(kv::set("c", &big[..MAX_VALUE_BYTES])),
                    0,
                )?;
                kv::delete("c")?;
                kv::delete(&"k".repeat(MAX_KEY_BYTES))?;
                expect("kv::delete of a missing key", code(kv::delete("c")), 0)
            }
            "full" => {
                kv::set("there", b"again")?; // an existing key may change
                let e = kv::set("new", b"x").unwrap_err();
                expect("kv::set in a full store", e.code, CODE_TOO_LARGE)?;
                expect(
                    "its reason",
                    e.reason.as_str(),
                    "the store of this plugin type has 16384 keys, the most (abi.MaxKVEntries)",
                )
            }
            "a" | "b" => kv::set("plugin", p.name.as_bytes()).map_err(Error::from),
            "quota-keys" => {
                kv::set("there", b"again")?; // an existing key may change
                let e = kv::set("new", b"x").unwrap_err();
                expect("kv::set past kvKeysPerHandler", e.code, CODE_TOO_LARGE)?;
                expect("its reason", e.reason.as_str(), "handler handler.wasm holds 16384 keys in its stores, the most (handlers.limits.kvKeysPerHandler)")?;
                let e = kv::compare_and_set("new", None, Some(b"x")).unwrap_err();
                expect(
                    "compare_and_set past kvKeysPerHandler",
                    e.code,
                    CODE_TOO_LARGE,
                )?;
                kv::delete("there")?;
                kv::set("new", b"x")?; // a key deleted makes room
                Ok(())
            }
            "quota-bytes" => {
                kv::set("there", b"")?; // smaller
                let e = kv::set("new", b"0123456789").unwrap_err();
                expect("kv::set past kvBytesPerHandler", e.code, CODE_TOO_LARGE)?;
                expect(
                    "its reason",
                    e.reason.as_str(),
                    "handler handler.wasm holds 16777211 bytes in its stores; 13 more would go over 16777216 (handlers.limits.kvBytesPerHandler)",
                )?;
                kv::set("new", b"01")?; // 5 bytes fit
                expect(
                    "one byte more",
                    code(kv::compare_and_set("new", Some(b"01"), Some(b"012"))),
                    CODE_TOO_LARGE,
                )
            }
            "publish" => {
                wasmhost::publish("k", "v1")?;
                wasmhost::publish("k", "v2")?;
                expect(
                    "publish of an empty key",
                    code(wasmhost::publish("", "v")),
                    CODE_BAD_REQUEST,
                )
            }
            "publish-many" => {
                for i in 0..PUBLISH_KEYS {
                    wasmhost::publish(&format!("k{}", i), "v")?;
                }
                wasmhost::publish("k0", "again")?; // a key published already may change
                let e = wasmhost::publish("one-more", "v").unwrap_err();
                expect("the 65th key", e.code, CODE_TOO_LARGE)?;
                expect(
                    "its reason",
                    e.reason.as_str(),
                    "64 keys published, the most in one call (handlers.limits.publishKeys)",
                )
            }
            "publish-big" => {
                wasmhost::publish("a", &"v".repeat(MAX_VALUE_BYTES - 10))?;
                let e = wasmhost::publish("b", &"v".repeat(100)).unwrap_err();
                expect("over publishBytes", e.code, CODE_TOO_LARGE)?;
                expect(
                    "its reason",
                    e.reason.as_str(),
                    "65628 bytes published would go over 65536 (handlers.limits.publishBytes)",
                )
            }
            "publish-then-fail" => {
                wasmhost::publish("k", "v")?;
                Err(Error::fail("failed after publishing"))
            }
            "call" => {
                let resp = wasmhost::plugin_call("/pkg.Svc/Get", b"req")?;
                expect("the response's length", resp.len(), 70_000)?; // over the SDK's first buffer
                let e = wasmhost::plugin_call("/pkg.Svc/Fail", b"").unwrap_err();
                expect(
                    "a failed call",
                    (e.code, e.reason.as_str()),
                    (CODE_FAILED, "the plugin said no"),
                )?;
                expect(
                    "error_reason",
                    wasmhost::error_reason(),
                    "the plugin said no".to_string(),
                )?;
                let e = wasmhost::plugin_call("/pkg.Svc/Huge", b"").unwrap_err();
                expect("a response over the limit", e.code, CODE_TOO_LARGE)?;
                expect(
                    "its reason",
                    e.reason.as_str(),
                    "response of 1048577 bytes over the limit of 1048576 (handlers.limits.pluginCallResponseSize)",
                )?;
                expect(
                    "a call without a method",
                    code(wasmhost::plugin_call("", b"")),
                    CODE_BAD_REQUEST,
                )
            }
            "many-calls" => {
                for _ in 0..=PLUGIN_CALLS_PER_CALL {
                    wasmhost::plugin_call("/pkg.Svc/Small", b"")?;
                }
                Ok(())
            }
            "no-call" => expect(
                "plugin_call without a grant",
                code(wasmhost::plugin_call("/pkg.Svc/Get", b"")),
                CODE_DENIED,
            ),
            _ => Ok(()),
        }
    }

    fn deregister(&self, p: &Plugin) -> Result<(), Error> {
        kv::delete("a")?;
        if p.name == "b" {
            kv::delete("plugin")?;
        }
        Ok(())
    }
}

fn plugin(name: &str) -> Plugin {
    Plugin {
        plugin_type: "t".into(),
        name: name.into(),
        endpoint: "/e.sock".into(),
        versions: vec!["v1".into()],
        ..Plugin::default()
    }
}

#[test]
fn request() {
    let host = Fake::new(Test);
    let p = Plugin {
        socket: "/s.sock".into(),
        plugin_type: "t".into(),
        name: "request".into(),
        endpoint: "/e.sock".into(),
        versions: vec!["v2".into(), "".into(), "v1".into()],
    };
    assert_eq!(host.validate(&p), Ok(()));
}

#[test]
fn reasons() {
    let host = Fake::new(Test);
    assert_eq!(
        host.validate(&plugin("reject")),
        Err(Error::reject("not this one"))
    );
    assert_eq!(
        host.validate(&plugin("fail-silently")),
        Err(Error::fail(NO_REASON))
    );
    // The SDK cuts a reason to MAX_RESULT_BYTES.
    assert_eq!(
        host.validate(&plugin("long-reason")),
        Err(Error::reject("r".repeat(4096)))
    );
    assert_eq!(host.validate(&plugin("ok")), Ok(()));
}

#[test]
fn store() {
    let host = Fake::new(Test);
    assert_eq!(host.register(&plugin("kv")), Ok(()));
    let store = host.store("t");
    assert_eq!(store.keys().collect::<Vec<_>>(), ["a", "big"]);
    assert_eq!(host.kv("t", "a"), Some(b"2".to_vec()));
    assert_eq!(host.deregister(&plugin("kv")), Ok(()));
    assert_eq!(host.kv("t", "a"), None);
}

fn typed(plugin_type: &str, name: &str) -> Plugin {
    Plugin {
        plugin_type: plugin_type.into(),
        ..plugin(name)
    }
}

// The daemon keeps a store per plugin type: a handler serving two types sees the store of
// the plugin's type in each call, never the other's.
#[test]
fn a_store_per_type() {
    let host = Fake::new(Test);
    assert_eq!(host.register(&typed("t", "a")), Ok(()));
    assert_eq!(host.register(&typed("u", "b")), Ok(()));
    assert_eq!(host.kv("t", "plugin"), Some(b"a".to_vec()));
    assert_eq!(host.kv("u", "plugin"), Some(b"b".to_vec()));
    assert_eq!(host.validate(&typed("t", "read")), Err(Error::reject("a")));
    assert_eq!(host.validate(&typed("u", "read")), Err(Error::reject("b")));
    assert_eq!(
        host.validate(&typed("v", "read")),
        Err(Error::reject("none"))
    );
    assert_eq!(host.deregister(&typed("u", "b")), Ok(()));
    assert_eq!(host.kv("u", "plugin"), None);
    assert_eq!(host.kv("t", "plugin"), Some(b"a".to_vec()));
    host.kv_put("v", "plugin", b"put");
    assert_eq!(
        host.validate(&typed("v", "read")),
        Err(Error::reject("put"))
    );
    assert!(host.store("w").is_empty());
}

#[test]
fn full_store() {
    let host = Fake::new(Test);
    for i in 0..MAX_KV_ENTRIES - 1 {
        host.kv_put("t", &format!("k{}", i), b"");
    }
    host.kv_put("t", "there", b"");
    assert_eq!(host.register(&plugin("full")), Ok(()));
    assert_eq!(host.kv("t", "there"), Some(b"again".to_vec()));
}

// The quotas of one handler file (handlers.limits.kvKeysPerHandler, kvBytesPerHandler) count
// the stores of all its types together.
#[test]
fn handler_quotas() {
    let host = Fake::new(Test);
    for i in 0..KV_KEYS_PER_HANDLER - 2 {
        host.kv_put("u", &format!("k{}", i), b"");
    }
    host.kv_put("t", "there", b"");
    host.kv_put("v", "one", b"");
    assert_eq!(host.register(&plugin("quota-keys")), Ok(()));
    assert_eq!(host.kv("t", "new"), Some(b"x".to_vec()));
    assert_eq!(
        host.store("t").len() + host.store("u").len() + host.store("v").len(),
        KV_KEYS_PER_HANDLER
    );

    let host = {
        drop(host);
        Fake::new(Test)
    };
    // Two types' stores holding 16 MiB but 4 bytes (6 in "there" = "x" and 3 in the key
    // "big"), and 5 once "there" is emptied: room for "new" = "01", not one byte more.
    host.kv_put("t", "there", b"x");
    host.kv_put("u", "big", &vec![0; KV_BYTES_PER_HANDLER - 4 - 6 - 3]);
    assert_eq!(host.register(&plugin("quota-bytes")), Ok(()));
    assert_eq!(host.kv("t", "new"), Some(b"01".to_vec()));
}

#[test]
fn publish() {
    let host = Fake::new(Test);
    assert_eq!(host.validate(&plugin("publish")), Ok(()));
    assert_eq!(host.register(&plugin("publish")), Ok(()));
    assert_eq!(
        host.published().into_iter().collect::<Vec<_>>(),
        [("k".to_string(), "v2".to_string())]
    );
    assert_eq!(
        host.register(&plugin("publish-then-fail")),
        Err(Error::fail("failed after publishing"))
    );
    assert!(
        host.published().is_empty(),
        "a failed register's keys were kept: {:?}",
        host.published()
    );
    assert_eq!(host.register(&plugin("publish-many")), Ok(()));
    assert_eq!(host.published().len(), PUBLISH_KEYS);
    assert_eq!(host.published()["k0"], "again");
    assert_eq!(host.register(&plugin("publish-big")), Ok(()));
    assert_eq!(host.published().len(), 1);
}

#[test]
fn plugin_calls() {
    let host = Fake::new(Test);
    assert_eq!(host.register(&plugin("no-call")), Ok(()));
    let calls = Rc::new(Cell::new(0));
    let counted = calls.clone();
    host.answer_plugin_calls(move |method, req| {
        counted.set(counted.get() + 1);
        match method {
            "/pkg.Svc/Get" if req == b"req" => Ok(vec![b'r'; 70_000]),
            "/pkg.Svc/Huge" => Ok(vec![0; (1 << 20) + 1]),
            "/pkg.Svc/Small" => Ok(b"s".to_vec()),
            _ => Err("the plugin said no".to_string()),
        }
    });
    assert_eq!(host.register(&plugin("call")), Ok(()));
    // The SDK asked again for the response that did not fit its buffer: the same call,
    // answered once.
    assert_eq!(calls.get(), 3);

    let mut none = plugin("call");
    none.endpoint.clear();
    match host.register(&none) {
        Err(Error::Fail(r)) => assert!(r.ends_with("the plugin has no endpoint"), "reason {:?}", r),
        other => panic!("register of a plugin without an endpoint: {:?}", other),
    }

    // The daemon ends a call over handlers.limits.pluginCallsPerCall, and so does the fake.
    assert_eq!(
        host.register(&plugin("many-calls")),
        Err(Error::fail(
            "host: budget exceeded: handler.wasm wasmhost_register for plugin \"many-calls\" made more than 16 plugin_call calls in one call (the limit is 16, handlers.limits.pluginCallsPerCall)"
        ))
    );
    // and the call is over: the host functions are denied outside one.
    assert_eq!(kv::set("a", b"1").unwrap_err().code, CODE_DENIED);
}

#[test]
fn log() {
    let host = Fake::new(Test);
    assert_eq!(host.validate(&plugin("log")), Ok(()));
    let log = host.log();
    assert_eq!(log.len(), 3);
    assert_eq!(log[..2], ["DEBUG d".to_string(), "WARN w".to_string()]);
    assert_eq!(
        log[2],
        format!("ERROR {}", "é".repeat(MAX_LOG_LINE_BYTES / 2))
    );
}

// The daemon ends a call that logs over handlers.limits.logLinesPerCall or logBytesPerCall,
// dropping the line over, and so does the fake.
#[test]
fn log_budget() {
    let host = Fake::new(Test);
    assert_eq!(
        host.validate(&plugin("log-lines")),
        Err(Error::fail(
            "host: budget exceeded: handler.wasm wasmhost_validate for plugin \"log-lines\" logged more than 1000 lines in one call (the limit is 1000, handlers.limits.logLinesPerCall)"
        ))
    );
    assert_eq!(host.log().len(), LOG_LINES_PER_CALL);
    assert_eq!(host.log().last().map(String::as_str), Some("INFO line"));
    assert!(
        host.store("t").is_empty(),
        "the call went on after the budget: {:?}",
        host.store("t")
    );
    assert_eq!(kv::set("a", b"1").unwrap_err().code, CODE_DENIED);

    // Each call has a budget of its own.
    assert_eq!(host.validate(&plugin("log-most")), Ok(()));
    assert_eq!(host.validate(&plugin("log-most")), Ok(()));
    assert_eq!(host.log().len(), 3 * LOG_LINES_PER_CALL);

    assert_eq!(
        host.validate(&plugin("log-bytes")),
        Err(Error::fail(
            "host: budget exceeded: handler.wasm wasmhost_validate for plugin \"log-bytes\" logged more than 65536 bytes in one call (the limit is 65536, handlers.limits.logBytesPerCall)"
        ))
    );
    assert_eq!(host.log().len(), 3 * LOG_LINES_PER_CALL + 16);
    assert!(host.store("t").is_empty());
}

#[test]
fn outside_a_call() {
    let host = Fake::new(Test);
    assert_eq!(kv::get("a").unwrap_err().code, CODE_DENIED);
    assert_eq!(wasmhost::publish("k", "v").unwrap_err().code, CODE_DENIED);
    assert_eq!(
        wasmhost::plugin_call("/pkg.Svc/Get", b"").unwrap_err().code,
        CODE_DENIED
    );
    assert!(host.store("t").is_empty());
}

#[test]
fn a_panic_ends_the_call() {
    let host = Fake::new(Test);
    let r = catch_unwind(AssertUnwindSafe(|| host.validate(&plugin("panic"))));
    assert!(r.is_err());
    assert_eq!(kv::set("a", b"1").unwrap_err().code, CODE_DENIED);
    assert_eq!(host.register(&plugin("kv")), Ok(()));
}

#[test]
fn a_new_fake_starts_empty() {
    {
        let host = Fake::new(Test);
        host.kv_put("t", "a", b"1");
        assert_eq!(host.register(&plugin("publish")), Ok(()));
        wasmhost::log(Level::Info, "x");
    }
    let host = Fake::new(Test);
    assert!(host.store("t").is_empty() && host.published().is_empty() && host.log().is_empty());
}

#[test]
#[should_panic(expected = "this thread has a Fake already")]
fn one_fake_per_thread() {
    let _a = Fake::new(Test);
    let _b = Fake::new(Test);
}

#[test]
fn threads_have_their_own() {
    let host = Fake::new(Test);
    host.kv_put("t", "a", b"1");
    std::thread::spawn(|| {
        let other = Fake::new(Test);
        assert!(other.store("t").is_empty());
    })
    .join()
    .unwrap();
    assert_eq!(host.kv("t", "a"), Some(b"1".to_vec()));
}
