//! Exports the pthread-key interposer from the `dsh-host` executable, so that
//! plugin libraries bind to it (see src/keys.rs and ARCHITECTURE.md, host
//! duty 2).
fn main() {
    for symbol in ["pthread_key_create", "pthread_key_delete", "pthread_create"] {
        println!("cargo:rustc-link-arg-bins=-Wl,--export-dynamic-symbol={symbol}");
    }
}
