//! The examples' stop signal: SIGTERM or SIGINT (Ctrl-C), with the handlers installed when
//! registered, not when first awaited, so a signal that comes while a program starts is neither
//! lost nor fatal (the default action of an unhandled SIGINT ends the process at once).

/// SIGTERM or SIGINT, registered at once.
pub struct Shutdown {
    #[cfg(unix)]
    signals: Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>,
}

impl Shutdown {
    /// Installs the handlers; when they cannot be, says so on stderr (then only Ctrl-C stops the
    /// example, once awaited).
    pub fn register() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let signals = match (
                signal(SignalKind::terminate()),
                signal(SignalKind::interrupt()),
            ) {
                (Ok(t), Ok(i)) => Some((t, i)),
                (Err(e), _) | (_, Err(e)) => {
                    let program = env!("CARGO_CRATE_NAME");
                    eprintln!("{program}: cannot handle signals ({e}); Ctrl-C only");
                    None
                }
            };
            Shutdown { signals }
        }
        #[cfg(not(unix))]
        Shutdown {}
    }

    /// Until a signal comes (one after the last that was awaited).
    pub async fn requested(&mut self) {
        #[cfg(unix)]
        if let Some((term, int)) = &mut self.signals {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            return;
        }
        let _ = tokio::signal::ctrl_c().await;
    }
}
