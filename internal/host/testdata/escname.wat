;; Type "escname.example". Its manifest's name carries a terminal escape sequence (ESC [ 2 J,
;; clear the screen); every view of it must show it escaped.
(module
  (import "wasmhost" "result_set" (func $result_set (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "\0a\0fescname.example\12\08evil\1b[2J")
  (func (export "wasmhost_abi_version") (result i32) (i32.const 1))
  (func (export "wasmhost_manifest") (result i32)
    (drop (call $result_set (i32.const 0) (i32.const 27)))
    (i32.const 0))
  (func (export "wasmhost_validate") (param i32) (result i32) (i32.const 0))
  (func (export "wasmhost_register") (param i32) (result i32) (i32.const 0))
  (func (export "wasmhost_deregister") (param i32) (result i32) (i32.const 0)))
