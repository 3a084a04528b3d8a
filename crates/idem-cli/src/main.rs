//! The `idem` command (scaffold: being written).
fn main() {
    eprintln!("idem: not built yet");
    std::process::exit(1);
}
