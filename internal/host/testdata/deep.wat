;; Type "deep.example". Hostile in miniature: validate nests 40 blocks, which the tests refuse
;; with handlers.limits.maxNesting at 32 (the real compile bombs nest 100,000 deep; the tests
;; build those in Go, see bombModule).
(module
  (import "wasmhost" "result_set" (func $result_set (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "\0a\0cdeep.example")
  (func (export "wasmhost_abi_version") (result i32) (i32.const 1))
  (func (export "wasmhost_manifest") (result i32)
    (drop (call $result_set (i32.const 0) (i32.const 14)))
    (i32.const 0))
  (func (export "wasmhost_validate") (param i32) (result i32)
    (block
    (block
    (block
    (block
    (block
    (block
    (block
    (block
    (block
    (block
    (block
    (block
    (block
    (block
    (block
    (block
    (block
    (block
    (block
    (block
    (block
    (block
    (block
    (block
    (block
    (block
    (block
    (block
    (block
    (block
    (block
    (block
    (block
    (block
    (block
    (block
    (block
    (block
    (block
    (block
    ))))))))))))))))))))))))))))))))))))))))
    (i32.const 0))
  (func (export "wasmhost_register") (param i32) (result i32) (i32.const 0))
  (func (export "wasmhost_deregister") (param i32) (result i32) (i32.const 0)))
