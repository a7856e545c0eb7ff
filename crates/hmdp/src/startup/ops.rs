//! The scraper's listener of both processes: `/metrics` and `/health` without a credential.

use tokio::net::TcpListener;

use crate::http;

/// The scraper's listener (`HMDP_METRICS_LISTEN`, `HMDP_WORKER_LISTEN`) serving in the
/// background until [`OpsListener::stop`].
pub(super) struct OpsListener {
    stop: tokio::sync::oneshot::Sender<()>,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl OpsListener {
    pub(super) fn start(
        listener: TcpListener,
        endpoint: http::OpsEndpoint,
        options: http::ServeOptions,
    ) -> Self {
        let addr = listener.local_addr().ok();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(http::serve(
            listener,
            http::ops_app(endpoint),
            async {
                let _ = stopped.await;
            },
            options,
        ));
        if let Some(addr) = addr {
            tracing::info!(%addr, "metrics at http://{addr}/metrics");
        }
        Self { stop, server }
    }

    pub(super) async fn stop(self) {
        let _ = self.stop.send(());
        match self.server.await {
            Ok(Err(e)) => tracing::warn!(error = %e, "the metrics listener ended with an error"),
            Err(e) => tracing::warn!(error = %e, "the metrics listener task failed"),
            Ok(Ok(())) => {}
        }
    }
}
