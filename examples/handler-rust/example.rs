//! The example handler of handlers-wasm/example, in Rust with the Rust SDK (abi/rust). It
//! handles the plugin type "example.wasmhost.dev":
//!
//!   - validate accepts a plugin only if it supports version "v1";
//!   - register logs, remembers the plugin's endpoint in the key-value store, and publishes it;
//!   - deregister forgets it.
//!
//! The walkthrough, README.md beside this file, builds it and goes from there to a registered
//! plugin.

use wasmhost::{kv, Error, Handler, Level, Manifest, Plugin};

/// The one version of our (imaginary) plugin API this handler speaks.
const WANT_VERSION: &str = "v1";

/// The handler. It has no fields, on purpose: the host runs a pool of instances of this module
/// and throws one away after any failure, so nothing kept in memory is sure to be there at the
/// next call. What must be remembered goes in the key-value store, wasmhost::kv.
struct Example;

/// The key-value store key for a plugin: plugins are told apart by name.
fn store_key(p: &Plugin) -> String {
    format!("plugin/{}", p.name)
}

impl Handler for Example {
    /// Called first, for every plugin of our type. Error::reject refuses the plugin with a
    /// reason it is told; any other error says the handler failed (the host retries later).
    fn validate(&self, p: &Plugin) -> Result<(), Error> {
        if !p.supports(WANT_VERSION) {
            return Err(Error::reject(format!(
                "plugin {} supports versions [{}]; this handler needs {}",
                p.name,
                p.versions.join(", "),
                WANT_VERSION
            )));
        }
        Ok(())
    }

    /// Called after a successful validate. A host function's failure (?) fails the call, and
    /// the host retries it.
    fn register(&self, p: &Plugin) -> Result<(), Error> {
        wasmhost::log(Level::Info, &format!("registering {} at {}", p.name, p.endpoint));
        kv::set(&store_key(p), p.endpoint.as_bytes())?;
        // Published keys are shown with the registered plugin; only register may publish.
        wasmhost::publish("endpoint", &p.endpoint)?;
        Ok(())
    }

    /// Called when a registered plugin goes away. It is not retried, and after a daemon
    /// restart it may come for a plugin this handler has no record of.
    fn deregister(&self, p: &Plugin) -> Result<(), Error> {
        match kv::get(&store_key(p))? {
            None => {
                wasmhost::log(Level::Warn, &format!("deregistering {}, which this handler has no record of", p.name));
                Ok(())
            }
            Some(endpoint) => {
                let endpoint = String::from_utf8_lossy(&endpoint);
                wasmhost::log(Level::Info, &format!("deregistering {}, registered at {}", p.name, endpoint));
                Ok(kv::delete(&store_key(p))?)
            }
        }
    }
}

// The module's exports: the handler, and its manifest (what it handles, its name and version).
wasmhost::export!(
    Example,
    Manifest { plugin_types: &["example.wasmhost.dev"], name: "example", version: "0.1.0" }
);

// Unit tests of the handler's logic, run natively against the SDK's fake host
// (wasmhost::fake), without WebAssembly: README.md beside this file builds and runs them.
#[cfg(test)]
mod tests {
    use super::*;
    use wasmhost::fake::Fake;

    /// The plugin type of the plugins below, whose store the fake host shows.
    const TYPE: &str = "example.wasmhost.dev";

    fn plugin(name: &str, versions: &[&str]) -> Plugin {
        Plugin {
            socket: format!("/var/lib/wasmhost/plugins_registry/{}-reg.sock", name),
            plugin_type: TYPE.to_string(),
            name: name.to_string(),
            endpoint: format!("/var/lib/wasmhost/plugins/{}.sock", name),
            versions: versions.iter().map(|v| v.to_string()).collect(),
        }
    }

    fn last_log(host: &Fake<Example>) -> String {
        host.log().last().cloned().unwrap_or_default()
    }

    #[test]
    fn register_and_deregister() {
        let host = Fake::new(Example);
        let demo = plugin("demo", &["v1beta1", "v1"]);
        assert_eq!(host.validate(&demo), Ok(()));
        assert_eq!(host.register(&demo), Ok(()));
        assert_eq!(last_log(&host), "INFO registering demo at /var/lib/wasmhost/plugins/demo.sock");
        assert_eq!(host.kv(TYPE, "plugin/demo"), Some(demo.endpoint.clone().into_bytes()));
        assert_eq!(host.published().into_iter().collect::<Vec<_>>(), [("endpoint".to_string(), demo.endpoint.clone())]);

        // The daemon may register a plugin again (after a restart): same outcome.
        assert_eq!(host.register(&demo), Ok(()));
        assert_eq!(host.store(TYPE).len(), 1);

        assert_eq!(host.deregister(&demo), Ok(()));
        assert_eq!(last_log(&host), "INFO deregistering demo, registered at /var/lib/wasmhost/plugins/demo.sock");
        assert!(host.store(TYPE).is_empty(), "left in the store: {:?}", host.store(TYPE));
    }

    #[test]
    fn reject() {
        let host = Fake::new(Example);
        assert_eq!(
            host.validate(&plugin("old", &["v0", "v2"])),
            Err(Error::reject("plugin old supports versions [v0, v2]; this handler needs v1"))
        );
        assert_eq!(host.validate(&plugin("none", &[])), Err(Error::reject("plugin none supports versions []; this handler needs v1")));
    }

    // Deregistering a plugin this handler has no record of (registered before the store was
    // emptied, say) succeeds, with a warning.
    #[test]
    fn deregister_unknown() {
        let host = Fake::new(Example);
        assert_eq!(host.deregister(&plugin("demo", &["v1"])), Ok(()));
        assert_eq!(last_log(&host), "WARN deregistering demo, which this handler has no record of");
    }

    // What the store holds is what deregister goes by, whichever instance registered the plugin.
    #[test]
    fn deregister_from_store() {
        let host = Fake::new(Example);
        host.kv_put(TYPE, "plugin/demo", b"/elsewhere.sock");
        assert_eq!(host.deregister(&plugin("demo", &["v1"])), Ok(()));
        assert_eq!(last_log(&host), "INFO deregistering demo, registered at /elsewhere.sock");
    }
}
