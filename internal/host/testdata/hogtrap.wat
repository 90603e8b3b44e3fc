;; Type "hog.example", a shadow candidate that fails (issue 27): validate grows the memory one
;; page at a time until memory.grow is refused (at handlers.memoryLimit), filling every new
;; page, then traps (unreachable). register and deregister accept at once.
(module
  (import "wasmhost" "result_set" (func $result_set (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "\0a\0bhog.example")
  (func (export "wasmhost_abi_version") (result i32) (i32.const 1))
  (func (export "wasmhost_manifest") (result i32)
    (drop (call $result_set (i32.const 0) (i32.const 13)))
    (i32.const 0))
  (func $hog
    (local $page i32)
    (block $refused
      (loop $more
        (local.set $page (memory.grow (i32.const 1)))
        (br_if $refused (i32.eq (local.get $page) (i32.const -1)))
        (memory.fill (i32.shl (local.get $page) (i32.const 16)) (i32.const 1) (i32.const 65536))
        (br $more))))
  (func (export "wasmhost_validate") (param i32) (result i32)
    (call $hog)
    (unreachable))
  (func (export "wasmhost_register") (param i32) (result i32) (i32.const 0))
  (func (export "wasmhost_deregister") (param i32) (result i32) (i32.const 0)))
