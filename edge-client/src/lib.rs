//! edgecfl-edge-client
