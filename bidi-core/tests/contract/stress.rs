//! Many connections at once, then nothing left behind.

use futures_util::StreamExt;

use crate::support::{assert_no_tasks_left, echo};

both_runtimes! {
    /// 10,000 concurrent connections × 10 turns each, then zero alive tasks.
    async fn ten_thousand_connections() {
        let action = echo();
        let drivers: Vec<_> = (0..10_000)
            .map(|c| {
                let action = action.clone();
                tokio::spawn(async move {
                    let mut conn = action.connect(());
                    for t in 0..10 {
                        conn.send(format!("{c}/{t}")).await.unwrap();
                        let chunks: Vec<_> = conn.responses().collect().await;
                        assert_eq!(chunks.len(), 1);
                        assert_eq!(chunks[0].as_ref().unwrap(), &format!("echo: {c}/{t}"));
                    }
                    conn.close();
                    conn.output().await.unwrap()
                })
            })
            .collect();
        for driver in drivers {
            assert_eq!(driver.await.unwrap(), 10);
        }
        assert_no_tasks_left().await;
    }
}
