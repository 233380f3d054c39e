//! The publisher: the global AES key, the publish serial and the PUB socket.
//!
//! Invariant: serials strictly increase in the order frames reach the socket. Assigning the
//! serial, encrypting, signing and handing the frame to the transport happen under one lock,
//! so two concurrent publishes can never overtake each other (a minion drops any serial not
//! greater than the last it saw). Rotation replaces the key and restarts the serial at 0
//! under the same lock, as `SMaster.rotate_secrets` does.

use halite_proto::crypticle::Crypticle;
use halite_proto::envelope::publish_frame;
use halite_proto::rsa::{PrivateKey, SigAlgo};
use halite_proto::{value, Value};
use halite_transport::ServerTransport;
use std::sync::{Arc, Mutex};

struct State {
    aes: Arc<Crypticle>,
    serial: u64,
}

/// Encrypts, signs and sends publishes.
pub struct Publisher {
    transport: Arc<dyn ServerTransport>,
    signer: Option<(PrivateKey, SigAlgo)>,
    state: Mutex<State>,
}

impl Publisher {
    /// A publisher with a fresh AES key. `signer` is set when `sign_pub_messages` is on.
    pub fn new(transport: Arc<dyn ServerTransport>, signer: Option<(PrivateKey, SigAlgo)>) -> Self {
        Self {
            transport,
            signer,
            state: Mutex::new(State {
                aes: Arc::new(Crypticle::generate()),
                serial: 0,
            }),
        }
    }

    /// The current AES key string (for auth replies).
    pub fn aes(&self) -> Arc<Crypticle> {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .aes
            .clone()
    }

    /// Publishes `load` (a map) with the next serial.
    pub fn publish(&self, mut load: Value) -> Result<(), String> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.serial += 1;
        value::set(&mut load, "serial", Value::from(st.serial));
        let signer = self.signer.as_ref().map(|(k, a)| (k, *a));
        let frame = publish_frame(&st.aes, &load, signer).map_err(|e| e.to_string())?;
        self.transport.publish(frame).map_err(|e| e.to_string())
    }

    /// Replaces the AES key and restarts the serial.
    pub fn rotate(&self) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.aes = Arc::new(Crypticle::generate());
        st.serial = 0;
    }
}
