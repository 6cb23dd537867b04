//! The accept loops: one per `--host` address (llama-server takes a comma-separated
//! list), each connection served by hyper's HTTP/1 with title-case header names, as
//! llama-server's cpp-httplib writes them (`Access-Control-Allow-Origin`,
//! `Process-Start-Time-Unix`): clients that look headers up case-sensitively (Python's
//! `dict(response.headers)`, as llama.cpp's own test suite does) find them.
//!
//! A client that closes its connection makes hyper drop the request's future or body
//! stream, which drops the job's receiver: that is what cancels a generation.

use std::net::SocketAddr;

use axum::Router;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;

/// Binds every address of `hosts` (comma-separated) on `port`.
pub async fn bind_all(hosts: &str, port: u16) -> std::io::Result<Vec<TcpListener>> {
    let mut out = Vec::new();
    for host in hosts.split(',').map(str::trim).filter(|h| !h.is_empty()) {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        out.push(TcpListener::bind((host, port)).await?);
    }
    if out.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "--host names no address",
        ));
    }
    Ok(out)
}

/// Serves `router` on every listener until Ctrl-C.
pub async fn serve(listeners: Vec<TcpListener>, router: Router) {
    let loops: Vec<_> = listeners
        .into_iter()
        .map(|l| tokio::spawn(accept_loop(l, router.clone())))
        .collect();
    let all = async {
        for l in loops {
            let _ = l.await;
        }
    };
    tokio::select! {
        _ = all => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

async fn accept_loop(listener: TcpListener, router: Router) {
    loop {
        let (stream, _peer): (_, SocketAddr) = match listener.accept().await {
            Ok(c) => c,
            // Out of file descriptors and the like: the next accept may work.
            Err(_) => {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(router.clone());
        tokio::spawn(async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .title_case_headers(true)
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
