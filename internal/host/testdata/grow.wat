;; Type "grow.example". validate grows memory one page at a time until refused, then rejects
;; with "capped" if memory stayed within 32 pages (2 MiB, the tests' limit), else fails.
(module
  (import "wasmhost" "result_set" (func $result_set (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "\0a\0cgrow.example")
  (data (i32.const 100) "capped")
  (func (export "wasmhost_abi_version") (result i32) (i32.const 1))
  (func (export "wasmhost_manifest") (result i32)
    (drop (call $result_set (i32.const 0) (i32.const 14)))
    (i32.const 0))
  (func (export "wasmhost_validate") (param i32) (result i32)
    (block $refused
      (loop $more
        (br_if $refused (i32.eq (memory.grow (i32.const 1)) (i32.const -1)))
        (br $more)))
    (if (i32.gt_u (memory.size) (i32.const 32)) (then (return (i32.const 2))))
    (drop (call $result_set (i32.const 100) (i32.const 6)))
    (i32.const 1))
  (func (export "wasmhost_register") (param i32) (result i32) (i32.const 0))
  (func (export "wasmhost_deregister") (param i32) (result i32) (i32.const 0)))
