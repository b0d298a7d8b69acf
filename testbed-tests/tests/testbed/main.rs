//! The integration-test binary `testbed`: slurm-budget against a real Slurm testbed
//! (`scripts/testbed`), one module per suite. Each suite is one `#[ignore]`d test
//! that starts its own testbed, runs its scenario as a series of named checks, and
//! stops the testbed again (see `testbed_tests::testbed`). The suites run one after
//! the other, whatever `--test-threads` says.
//!
//! Run (after a release build: `scripts/setup`, or `cargo build --release --workspace`):
//!
//! ```sh
//! cargo test --release -p testbed-tests --test testbed -- --ignored            # all three
//! cargo test --release -p testbed-tests --test testbed -- --ignored contract   # one suite
//! CONTRACT_SECTIONS="4 5" cargo test --release -p testbed-tests --test testbed -- --ignored contract
//! KEEP_TESTBED=1 cargo test ... -- --ignored drain                              # leave it up
//! ```
//!
//! Each suite's folder and port base: `TEST_SLURM_DIR`/`TEST_SLURM_PORT_BASE`
//! (priority_usage), `CONTRACT_DIR`/`CONTRACT_PORT_BASE` (contract),
//! `DRAIN_DIR`/`DRAIN_PORT_BASE` (drain), `FAULTS_DIR`/`FAULTS_PORT_BASE`
//! (ledger_faults), `SITE_FACTOR_DIR`/`SITE_FACTOR_PORT_BASE` (site_factor), `SHADOW_DIR`/`SHADOW_PORT_BASE` (shadow),
//! `PARTITION_TIER_DIR`/`PARTITION_TIER_PORT_BASE` (partition_tier), `QOS_DIR`/`QOS_PORT_BASE`
//! (qos). Every other `TESTBED_*` variable (e.g.
//! `TESTBED_SLURM`) reaches `scripts/testbed` unchanged.

mod contract;
mod drain;
mod ledger_faults;
mod partition_tier;
mod preemption;
mod priority_usage;
mod qos;
mod shadow;
mod site_factor;
mod stability;
