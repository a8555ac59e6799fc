use mailer_sdk::operator;

struct Total(u64);

#[operator(aggregate)]
impl Total {
    fn add(&mut self, n: u64) {
        self.0 += n;
    }
}

fn main() {}
