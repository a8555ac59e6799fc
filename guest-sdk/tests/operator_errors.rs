//! What `#[operator]` says about a function it cannot turn into a plugin:
//! each case under `tests/ui/` must fail to compile with the message beside
//! it (`TRYBUILD=overwrite cargo test -p mailer-sdk --test operator_errors`
//! rewrites the messages after a deliberate change).

#[test]
fn operator_errors_name_the_kind_and_the_signature() {
    trybuild::TestCases::new().compile_fail("tests/ui/*.rs");
}
