;; Types "kvfill.a" to "kvfill.d". Hostile: register fills the store of its plugin type with
;; 60 KiB values under new keys until kv_set refuses, then accepts. One file declaring four
;; types must not get four stores' worth (handlers.limits.kvKeysPerHandler, kvBytesPerHandler).
(module
  (import "wasmhost" "result_set" (func $result_set (param i32 i32) (result i32)))
  (import "wasmhost" "kv_set" (func $kv_set (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "\0a\08kvfill.a\0a\08kvfill.b\0a\08kvfill.c\0a\08kvfill.d")
  (func (export "wasmhost_abi_version") (result i32) (i32.const 1))
  (func (export "wasmhost_manifest") (result i32)
    (drop (call $result_set (i32.const 0) (i32.const 40)))
    (i32.const 0))
  (func (export "wasmhost_validate") (param i32) (result i32) (i32.const 0))
  (func (export "wasmhost_register") (param i32) (result i32)
    (local $i i32)
    (loop $fill
      (i32.store (i32.const 65000) (local.get $i))
      (if (i32.eqz (call $kv_set (i32.const 65000) (i32.const 4) (i32.const 0) (i32.const 61440)))
        (then
          (local.set $i (i32.add (local.get $i) (i32.const 1)))
          (br $fill))))
    (i32.const 0))
  (func (export "wasmhost_deregister") (param i32) (result i32) (i32.const 0)))
