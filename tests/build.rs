//! The bench binary loads plugins like `dsh-host` does, so it exports the
//! pthread-key interposer too (see host/src/keys.rs).
fn main() {
    for symbol in ["pthread_key_create", "pthread_key_delete", "pthread_create"] {
        println!("cargo:rustc-link-arg-bins=-Wl,--export-dynamic-symbol={symbol}");
    }
}
