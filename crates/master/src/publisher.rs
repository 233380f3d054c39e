//! The publisher: the global AES key, the publish serial and the PUB socket.
//!
//! Invariant: serials strictly increase in the order frames reach the socket. Assigning the
//! serial, encrypting, signing and handing the frame to the transport happen under one lock,
//! so two concurrent publishes can never overtake each other (a minion drops any serial not
//! greater than the last it saw). Rotation replaces the key and restarts the serial at 0
//! under the same lock, as `SMaster.rotate_secrets` does.
//!
//! The auth reply's `sig` over the AES key is made once per key ([`Publisher::auth_keys`]),
//! not once per sign-in: it is the same for every minion, and it halves the master's RSA
//! private operations in an auth storm.

use halite_proto::crypticle::Crypticle;
use halite_proto::envelope::{aes_key_sig, publish_frame};
use halite_proto::rsa::{PrivateKey, SigAlgo};
use halite_proto::{value, Value};
use halite_transport::ServerTransport;
use std::sync::{Arc, Mutex};

struct State {
    aes: Arc<Crypticle>,
    /// `aes_key_sig` of `aes`, made on first use.
    aes_sig: Option<Arc<[u8]>>,
    serial: u64,
}

/// Encrypts, signs and sends publishes.
pub struct Publisher {
    transport: Arc<dyn ServerTransport>,
    master: PrivateKey,
    signer: Option<(PrivateKey, SigAlgo)>,
    state: Mutex<State>,
}

impl Publisher {
    /// A publisher with a fresh AES key. `master` signs the key for auth replies; `signer` is
    /// set when `sign_pub_messages` is on.
    pub fn new(
        transport: Arc<dyn ServerTransport>,
        master: PrivateKey,
        signer: Option<(PrivateKey, SigAlgo)>,
    ) -> Self {
        Self {
            transport,
            master,
            signer,
            state: Mutex::new(State {
                aes: Arc::new(Crypticle::generate()),
                aes_sig: None,
                serial: 0,
            }),
        }
    }

    /// The current AES key and its `sig` for auth replies.
    pub fn auth_keys(&self) -> halite_proto::Result<(Arc<Crypticle>, Arc<[u8]>)> {
        let (aes, sig) = {
            let st = self.state.lock().unwrap_or_else(|e| e.into_inner());
            (st.aes.clone(), st.aes_sig.clone())
        };
        if let Some(sig) = sig {
            return Ok((aes, sig));
        }
        // Signed outside the lock so publishes are not held up; a concurrent rotation
        // makes this signature stale, so it is only kept if the key is still current.
        let sig: Arc<[u8]> = aes_key_sig(&self.master, aes.key_string())?.into();
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if Arc::ptr_eq(&st.aes, &aes) {
            st.aes_sig = Some(sig.clone());
        }
        Ok((aes, sig))
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
        st.aes_sig = None;
        st.serial = 0;
    }
}
