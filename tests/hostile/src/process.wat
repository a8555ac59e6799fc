;; A process plugin, written by hand, that emits nothing for each record,
;; except that a batch holding a record whose value starts with the trigger
;; byte makes it misbehave (the misdeed, filled in by lib.rs).
(module
  (import "mailer:plugin/state@0.1.0" "set" (func $set (param i32 i32 i32 i32)))
  {{COMMON}}

  (func (export "process-batch") (param $input i32) (param $len i32) (result i32)
    (local $n i32) (local $out i32) (local $size i32)
    (if (call $offends (local.get $input))
      (then {{MISDEED}}))
    ;; count:u32, then `0 0:u32` (no records) per record
    (local.set $n (i32.load (local.get $input)))
    (local.set $size (i32.add (i32.const 4) (i32.mul (local.get $n) (i32.const 5))))
    (local.set $out (call $alloc (local.get $size) (i32.const 4)))
    (i32.store (local.get $out) (local.get $n))
    (memory.fill (i32.add (local.get $out) (i32.const 4)) (i32.const 0) (i32.sub (local.get $size) (i32.const 4)))
    (i32.store (i32.const 0) (local.get $out))
    (i32.store (i32.const 4) (local.get $size))
    (i32.const 0))

  ;; The host has copied the output: the next call starts with an empty heap.
  (func (export "cabi_post_process-batch") (param i32)
    (global.set $heap (i32.const 1024)))

  ;; The per-record exports (the host calls the batch one).
  (func (export "on-record") (param i32 i32 i32 i32 i32 i64 i32 i32) (result i32)
    unreachable)
  (func (export "on-timer") (param i32 i32 i32 i32 i64) (result i32)
    unreachable)
)
