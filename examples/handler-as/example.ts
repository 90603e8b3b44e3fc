// The example handler of handlers-wasm/example, in AssemblyScript with the AssemblyScript SDK
// (abi/assemblyscript). It handles the plugin type "example.wasmhost.dev":
//
//   - validate accepts a plugin only if it supports version "v1";
//   - register logs, remembers the plugin's endpoint in the key-value store, and publishes it;
//   - deregister forgets it.
//
// The walkthrough, README.md beside this file, builds it and goes from there to a registered
// plugin.
import {
  Handler, Manifest, Plugin, handle, OK, NOT_FOUND, reject, failCode, log, LOG_INFO, LOG_WARN,
  publish, kvGet, kvSet, kvDelete,
} from "wasmhost";

// The module's exports: those of the ABI, which the SDK implements.
export {
  wasmhost_abi_version, wasmhost_manifest, wasmhost_validate, wasmhost_register, wasmhost_deregister,
} from "wasmhost";

// The one version of our (imaginary) plugin API this handler speaks.
const WANT_VERSION = "v1";

// The key-value store key for a plugin: plugins are told apart by name.
function storeKey(p: Plugin): string {
  return "plugin/" + p.name;
}

// The handler. It has no fields, on purpose: the host runs a pool of instances of this module
// and throws one away after any failure, so nothing kept in memory is sure to be there at the
// next call. What must be remembered goes in the key-value store (kvSet, kvGet).
class Example extends Handler {
  // Called first, for every plugin of our type. reject() refuses the plugin with a reason it is
  // told; fail() says the handler failed (the host retries later).
  validate(p: Plugin): i32 {
    if (!p.supports(WANT_VERSION)) {
      return reject("plugin " + p.name + " supports versions [" + p.versions.join(", ") + "]; this handler needs " + WANT_VERSION);
    }
    return OK;
  }

  // Called after a successful validate.
  register(p: Plugin): i32 {
    log(LOG_INFO, "registering " + p.name + " at " + p.endpoint);
    let rc = kvSet(storeKey(p), p.endpoint);
    if (rc < 0) return failCode("kv_set", storeKey(p), rc); // not a rejection: the host will retry
    // Published keys are shown with the registered plugin; only register may publish.
    rc = publish("endpoint", p.endpoint);
    if (rc < 0) return failCode("publish", "endpoint", rc);
    return OK;
  }

  // Called when a registered plugin goes away. It is not retried, and after a daemon restart
  // it may come for a plugin this handler has no record of.
  deregister(p: Plugin): i32 {
    const got = kvGet(storeKey(p));
    if (got.code == NOT_FOUND) {
      log(LOG_WARN, "deregistering " + p.name + ", which this handler has no record of");
      return OK;
    }
    if (got.code < 0) return failCode("kv_get", storeKey(p), got.code);
    log(LOG_INFO, "deregistering " + p.name + ", registered at " + got.text());
    const rc = kvDelete(storeKey(p));
    if (rc < 0) return failCode("kv_delete", storeKey(p), rc);
    return OK;
  }
}

// The handler and its manifest (what it handles, its name and version). This runs when the
// module is instantiated, before the host reads the manifest.
handle(new Manifest(["example.wasmhost.dev"], "example", "0.1.0"), new Example());
