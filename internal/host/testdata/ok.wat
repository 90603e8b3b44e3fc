;; A well-behaved handler of plugin type "ok.example": validate logs and accepts, register
;; publishes k=v, deregister accepts.
(module
  (import "wasmhost" "result_set" (func $result_set (param i32 i32) (result i32)))
  (import "wasmhost" "log" (func $log (param i32 i32 i32)))
  (import "wasmhost" "publish" (func $publish (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  ;; Manifest{plugin_types: ["ok.example"], name: "ok", version: "1"}
  (data (i32.const 0) "\0a\0aok.example\12\02ok\1a\011")
  (data (i32.const 100) "validating")
  (data (i32.const 200) "kv")
  (func (export "wasmhost_abi_version") (result i32) (i32.const 1))
  (func (export "wasmhost_manifest") (result i32)
    (drop (call $result_set (i32.const 0) (i32.const 19)))
    (i32.const 0))
  (func (export "wasmhost_validate") (param i32) (result i32)
    (call $log (i32.const 1) (i32.const 100) (i32.const 10))
    (i32.const 0))
  (func (export "wasmhost_register") (param i32) (result i32)
    (if (i32.ne (call $publish (i32.const 200) (i32.const 1) (i32.const 201) (i32.const 1)) (i32.const 0))
      (then (return (i32.const 2))))
    (i32.const 0))
  (func (export "wasmhost_deregister") (param i32) (result i32) (i32.const 0)))
