//! The OpenAPI 3 document served at `GET /v1/openapi.json`, written by hand.
//!
//! A test (`tests/service/api.rs`) checks that every route of the router is
//! listed here with its methods, so the document cannot silently fall behind;
//! `scripts/conformance` (schemathesis, run by `scripts/test`) checks that
//! budgetd answers as it says: no 5xx, documented status codes, bodies
//! matching their schemas.
//!
//! Every operation can answer an [`ErrorBody`](budget_protocol::service::ErrorBody)
//! with a 4xx (bad query or body, authentication, permission, body too large,
//! rate limit, timeout, Slurm refusing: 409) or a 5xx (Slurm unreachable: 502, the
//! database failed); [`served`] adds those two responses to each operation, so no
//! operation can be listed without them. It also lists, on each operation, the two
//! refusals that come before any handler and so concern every route alike: 403 for
//! an agent token on any authenticated route but its reports (agent tokens read
//! nothing; `/v1/health` and this document need no authentication), and
//! 503 for a TCP connection in the reserve kept for controller and agent tokens
//! when the request carries neither (`crate::server`).

use std::collections::HashMap;
use std::sync::OnceLock;

/// The document (JSON text).
pub const DOCUMENT: &str = r##"{
  "openapi": "3.0.3",
  "info": {
    "title": "slurm-budget budgetd",
    "version": "1",
    "description": "GPU-time budgets and hierarchical fair share for Slurm. Unix-socket callers are identified by peer credentials; TCP callers send Authorization: Bearer <token>. Errors are {\"error\": \"...\"} with a 4xx/5xx status. Times in query parameters accept Unix seconds, RFC 3339 or YYYY-MM-DDTHH:MM:SS (service-local time); responses use Unix seconds. Allocations and usage are weighted GPU-hours."
  },
  "components": {
    "securitySchemes": { "bearer": { "type": "http", "scheme": "bearer" } },
    "responses": {
      "Error": { "description": "{\"error\": \"...\"} (details: per-item errors, e.g. an import's bad lines)", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } } },
      "Forbidden": { "description": "the caller's role may not do this; an agent token (role=agent) is refused every authenticated route but POST /v1/agent/report", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } } },
      "Unavailable": { "description": "over TCP, a connection admitted beyond max_connections or the per-address cap, into the reserve kept for controller and agent tokens (reserved_connections): a request carrying neither token is answered this and the connection closed; try again later", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } } }
    },
    "schemas": {
      "Error": { "type": "object", "required": ["error"], "properties": { "error": { "type": "string" }, "details": {} } },
      "Account": { "type": "object", "required": ["name", "allocation_gpu_hours"], "properties": {
        "name": { "$ref": "#/components/schemas/Name" }, "parent": { "type": "string", "pattern": "^([a-z0-9][a-z0-9_.-]{0,63})?$", "nullable": true, "description": "an existing account; null, \"\" or \"root\": top level" },
        "allocation_gpu_hours": { "$ref": "#/components/schemas/GpuHours" }, "overcommit": { "type": "boolean" } }, "additionalProperties": false },
      "AccountPatch": { "type": "object", "description": "fields to change; an absent field is left as it is (null is refused)", "properties": { "allocation_gpu_hours": { "$ref": "#/components/schemas/GpuHours" }, "parent": { "type": "string", "pattern": "^([a-z0-9][a-z0-9_.-]{0,63})?$", "description": "an existing account; \"\" or \"root\": top level" }, "overcommit": { "type": "boolean" } }, "additionalProperties": false },
      "Member": { "type": "object", "required": ["user", "account"], "properties": { "user": { "$ref": "#/components/schemas/Name" }, "account": { "$ref": "#/components/schemas/Name" }, "allocation_gpu_hours": { "type": "number", "minimum": 0, "maximum": 1e9, "nullable": true, "description": "null: share the account's rest equally" } }, "additionalProperties": false },
      "Coordinator": { "type": "object", "required": ["user", "account"], "properties": { "user": { "$ref": "#/components/schemas/Name" }, "account": { "$ref": "#/components/schemas/Name" } }, "additionalProperties": false },
      "GpuHours": { "type": "number", "minimum": 0, "maximum": 1e9, "description": "weighted GPU-hours" },
      "Weight": { "type": "number", "minimum": 0, "exclusiveMinimum": true, "maximum": 1e6 },
      "Time": { "type": "string", "pattern": "^([0-9]{1,10}|[0-9]{4}-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)|02-(0[1-9]|1[0-9]|2[0-8]))[T ]([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])?)$", "description": "Unix seconds, RFC 3339 (2026-01-01T00:00:00Z) or YYYY-MM-DDTHH:MM:SS (service-local time); 29 February is taken too (leap years are beyond a pattern)" },
      "PolicyPatch": {"type": "object", "description": "any non-empty subset of the settable policy fields; null clears a site cap and puts max_requeues back to the rule's default (null is refused for the other fields). hysteresis, tier_band, tier_projection, share_order, entitled_first and balance_band are constants of the rule: a patch naming one is refused (422) and changes nothing.", "properties": {"window_secs": {"type": "integer", "minimum": 3600, "maximum": 31622400}, "default_min_runtime_secs": {"type": "integer", "minimum": 0, "maximum": 31622400, "description": "at most max_min_runtime_secs"}, "max_min_runtime_secs": {"type": "integer", "minimum": 0, "maximum": 31622400}, "require_min_runtime": {"type": "boolean"}, "snapshot_max_age_secs": {"type": "integer", "minimum": 1, "maximum": 86400}, "idle_threshold_secs": {"type": "integer", "minimum": 0, "maximum": 31622400}, "site_max_preemptions": {"type": "integer", "minimum": 0, "maximum": 4294967295, "nullable": true, "description": "Site cap: rebalancing preemptions per window (absent or null: none)."}, "site_max_lost_gpu_hours": {"type": "number", "minimum": 0, "maximum": 1000000000.0, "nullable": true, "description": "Site cap: GPU-hours lost to rebalancing per window (absent or null: none)."}, "max_requeues": {"type": "integer", "minimum": 0, "maximum": 4294967295, "nullable": true, "description": "A job requeued this many times is no longer taken for rebalancing (absent or null: the rule's default, 1; 4294967295: no cap)."}, "preemption": {"type": "string", "enum": ["gentle", "default", "aggressive"], "description": "How readily the rule preempts: a preset benefit/cost factor, gentle 4, default 2, aggressive 1 (a victim is taken only when the entitled GPU-hours it delivers sooner than turnover are at least this many times the work it loses plus a restart); absent: default."}}, "additionalProperties": false, "minProperties": 1},
      "Hostlist": { "type": "string", "pattern": "^[A-Za-z0-9_.,\\[\\]-]{1,4096}$", "description": "a Slurm hostlist such as gpu[1-2],gpu7" },
      "DrainRequest": { "type": "object", "required": ["nodes", "reason"], "additionalProperties": false, "properties": { "nodes": { "$ref": "#/components/schemas/Hostlist" }, "reason": { "type": "string", "minLength": 1, "maxLength": 200, "pattern": "^[^\"=\\u0000-\\u001f\\u007f-\\u009f]*[^\"=\\s\\u0000-\\u001f\\u007f-\\u009f][^\"=\\u0000-\\u001f\\u007f-\\u009f]*$", "description": "at most 200 characters, not blank, no quotes, '=' or control characters (Slurm stores it in the node's Reason)" } } },
      "Weights": { "type": "object", "properties": { "default": { "type": "number" }, "by_type": { "type": "object", "additionalProperties": { "type": "number" } } } },
      "WeightsPatch": { "type": "object", "description": "an absent field is left as it is (null is refused)", "properties": { "default": { "$ref": "#/components/schemas/Weight" }, "set": { "type": "object", "description": "GPU type (1-64 characters of letters, digits, '-', '_', '.'; case-insensitive) -> weight", "patternProperties": { "^[A-Za-z0-9_.-]{1,64}$": { "$ref": "#/components/schemas/Weight" } }, "additionalProperties": false } }, "additionalProperties": false },
      "Policy": {"type": "object", "description": "The site's settings (docs/design.md §6.6); every other number of the rule is a documented constant of it.", "properties": {"window_secs": {"type": "integer", "minimum": 3600, "maximum": 31622400}, "default_min_runtime_secs": {"type": "integer", "minimum": 0, "maximum": 31622400, "description": "at most max_min_runtime_secs"}, "max_min_runtime_secs": {"type": "integer", "minimum": 0, "maximum": 31622400}, "require_min_runtime": {"type": "boolean"}, "hysteresis": {"type": "number", "minimum": 0, "maximum": 10, "description": "The rule's fixed rank hysteresis (0.1), written for plugins of the previous release, which require it; a constant of the rule, not settable (docs/design.md §6.6)."}, "snapshot_max_age_secs": {"type": "integer", "minimum": 1, "maximum": 86400}, "idle_threshold_secs": {"type": "integer", "minimum": 0, "maximum": 31622400}, "site_max_preemptions": {"type": "integer", "minimum": 0, "maximum": 4294967295, "nullable": true, "description": "Site cap: rebalancing preemptions per window (absent or null: none)."}, "site_max_lost_gpu_hours": {"type": "number", "minimum": 0, "maximum": 1000000000.0, "nullable": true, "description": "Site cap: GPU-hours lost to rebalancing per window (absent or null: none)."}, "max_requeues": {"type": "integer", "minimum": 0, "maximum": 4294967295, "nullable": true, "description": "A job requeued this many times is no longer taken for rebalancing (absent or null: the rule's default, 1; 4294967295: no cap)."}, "preemption": {"type": "string", "enum": ["gentle", "default", "aggressive"], "description": "How readily the rule preempts: a preset benefit/cost factor, gentle 4, default 2, aggressive 1 (a victim is taken only when the entitled GPU-hours it delivers sooner than turnover are at least this many times the work it loses plus a restart); absent: default."}}, "additionalProperties": false},
      "ShareRow": { "type": "object", "properties": { "account": { "type": "string" }, "parent": { "type": "string", "nullable": true }, "user": { "type": "string", "nullable": true }, "depth": { "type": "integer" }, "allocation_gpu_hours": { "type": "number" }, "usage_gpu_hours": { "type": "number" }, "free_usage_gpu_hours": { "type": "number" }, "ratio": { "type": "number" }, "rank": { "type": "integer", "description": "1 = lowest ratio among siblings" }, "leaf_rank": { "type": "integer", "nullable": true }, "fair_share_factor": { "type": "number" }, "tier": { "type": "string", "enum": ["budgeted", "over_budget", "free"] }, "overcommit": { "type": "boolean" } } },
      "Name": { "type": "string", "pattern": "^[a-z0-9][a-z0-9_.-]{0,63}$", "description": "account or user name" },
      "Health": { "type": "object", "required": ["generation", "schema_version", "started_at", "status", "version"], "additionalProperties": false, "properties": { "generation": { "type": "integer", "minimum": 0 }, "schema_version": { "type": "integer" }, "started_at": { "type": "integer" }, "status": { "type": "string" }, "version": { "type": "string" } } },
      "AccountRow": { "type": "object", "required": ["name", "parent", "allocation_gpu_hours", "overcommit"], "additionalProperties": false, "properties": { "name": { "type": "string" }, "parent": { "type": "string", "nullable": true }, "allocation_gpu_hours": { "type": "number", "minimum": 0 }, "overcommit": { "type": "boolean" } } },
      "MemberRow": { "type": "object", "required": ["user", "account", "allocation_gpu_hours"], "additionalProperties": false, "properties": { "user": { "type": "string" }, "account": { "type": "string" }, "allocation_gpu_hours": { "type": "number", "nullable": true } } },
      "AccountDetail": { "type": "object", "required": ["account", "children", "coordinators", "members"], "additionalProperties": false, "properties": { "account": { "$ref": "#/components/schemas/AccountRow" }, "children": { "type": "array", "items": { "type": "string" } }, "coordinators": { "type": "array", "items": { "type": "string" } }, "members": { "type": "array", "items": { "$ref": "#/components/schemas/MemberRow" } } } },
      "AuditEntry": { "type": "object", "required": ["id", "at", "actor", "action", "target"], "additionalProperties": false, "properties": { "id": { "type": "integer" }, "at": { "type": "integer" }, "actor": { "type": "string" }, "action": { "type": "string" }, "target": { "type": "string" }, "old": { "nullable": true }, "new": { "nullable": true } } },
      "UsageReport": { "type": "object", "required": ["from", "to", "by", "rows"], "additionalProperties": false, "properties": { "from": { "type": "integer" }, "to": { "type": "integer" }, "by": { "type": "string", "enum": ["account", "user"] },
        "rows": { "type": "array", "items": { "type": "object", "required": ["account", "usage_gpu_hours", "raw_gpu_hours", "free_gpu_hours", "in_tree"], "additionalProperties": false, "properties": { "account": { "type": "string" }, "user": { "type": "string", "nullable": true }, "usage_gpu_hours": { "type": "number" }, "raw_gpu_hours": { "type": "number" }, "free_gpu_hours": { "type": "number" }, "in_tree": { "type": "boolean" } } } } } },
      "LineError": { "type": "object", "required": ["line", "error"], "properties": { "line": { "type": "integer" }, "error": { "type": "string" } } },
      "RefusedRun": { "type": "object", "required": ["job_id", "run", "index", "error"], "additionalProperties": false, "properties": { "job_id": { "type": "integer" }, "run": { "type": "integer" }, "index": { "type": "integer" }, "error": { "type": "string" } } },
      "ImportReport": { "type": "object", "required": ["lines", "runs", "inserted", "updated", "unchanged", "skipped", "invalid"], "additionalProperties": false, "properties": { "lines": { "type": "integer" }, "runs": { "type": "integer" }, "inserted": { "type": "integer" }, "updated": { "type": "integer" }, "unchanged": { "type": "integer" }, "skipped": { "type": "array", "items": { "$ref": "#/components/schemas/LineError" } }, "invalid": { "type": "array", "items": { "$ref": "#/components/schemas/LineError" } }, "conflicts": { "type": "array", "items": { "$ref": "#/components/schemas/RefusedRun" } } } },
      "ShareReport": { "type": "object", "required": ["at", "window_secs", "rows"], "additionalProperties": false, "properties": { "at": { "type": "integer" }, "window_secs": { "type": "integer" }, "rows": { "type": "array", "items": { "$ref": "#/components/schemas/ShareRow" } } } },
      "Why": { "type": "object", "description": "budget_protocol::why::Why", "required": ["at", "job_id", "run", "account", "user", "state", "gpus", "tier", "path"], "properties": { "at": { "type": "integer" }, "job_id": { "type": "integer" }, "run": { "type": "integer" }, "account": { "type": "string" }, "user": { "type": "string" }, "state": { "type": "string", "enum": ["pending", "running", "ended", "requeued"] }, "gpus": { "type": "integer" }, "tier": { "type": "string" }, "path": { "type": "array", "items": { "type": "object" } } } },
      "HoldingJob": { "type": "object", "required": ["job_id", "run", "account", "user", "gpus", "free_tier", "requeue_at", "leaves", "partition"], "properties": { "job_id": { "type": "integer" }, "run": { "type": "integer" }, "account": { "type": "string" }, "user": { "type": "string" }, "gpus": { "type": "integer" }, "free_tier": { "type": "boolean" }, "start": { "type": "integer", "nullable": true }, "requeue_at": { "type": "integer", "description": "when the job leaves the node: with leaves=requeue when the drain requeues it (now for free tier, else its protected window's end); with leaves=time_limit its end time (Slurm's EndTime)" }, "leaves": { "type": "string", "enum": ["requeue", "time_limit"], "description": "requeue: the drain requeues it; time_limit: its partition has PreemptMode=OFF, nothing requeues it, it runs to its time limit (absent from older budgetd: requeue)" }, "partition": { "type": "string" } } },
      "DrainStatus": { "type": "object", "required": ["node", "reason", "since", "actor", "slurm_state", "empty", "empty_at", "jobs"], "additionalProperties": false, "properties": { "node": { "type": "string" }, "reason": { "type": "string" }, "since": { "type": "integer" }, "actor": { "type": "string" }, "slurm_state": { "type": "string" }, "empty": { "type": "boolean" }, "empty_at": { "type": "integer" }, "jobs": { "type": "array", "items": { "$ref": "#/components/schemas/HoldingJob" } } } },
      "PreemptionReason": { "type": "string", "description": "partition_tier: the preemptor's partition has the higher PriorityTier (slurm.conf) and the victim was past its protected window; the partition order won over the budgets. qos: the preemptor's QOS lists the victim's in its Preempt= (sacctmgr) and the victim was past its protected window; the QOS order won over the budgets", "enum": ["free_tier", "over_budget", "rebalance", "drain", "partition_tier", "qos"] },
      "PreemptionRecord": { "type": "object", "description": "budget_protocol::preemption::PreemptionRecord; account, user, gpus and start are taken from the ledger when absent (a run the ledger lacks needs them)", "required": ["victim", "run", "reason", "at"], "additionalProperties": false, "properties": { "victim": { "type": "integer", "minimum": 0, "maximum": 4294967295 }, "run": { "type": "integer", "minimum": 0, "maximum": 4294967295 }, "preemptor": { "type": "integer", "minimum": 0, "maximum": 4294967295, "nullable": true }, "reason": { "$ref": "#/components/schemas/PreemptionReason" }, "at": { "type": "integer", "minimum": 1, "maximum": 4102444800 }, "account": { "type": "string", "nullable": true }, "user": { "type": "string", "nullable": true }, "gpus": { "type": "integer", "minimum": 0, "maximum": 4294967295, "nullable": true }, "start": { "type": "integer", "minimum": -9223372036854775808, "maximum": 9223372036854775807, "nullable": true } } },
      "PreemptionReport": { "type": "object", "required": ["since", "rows", "by_account"], "additionalProperties": false, "properties": { "since": { "type": "integer" },
        "rows": { "type": "array", "items": { "type": "object", "required": ["job_id", "run", "account", "user", "reason", "at", "gpus"], "properties": { "job_id": { "type": "integer" }, "run": { "type": "integer" }, "account": { "type": "string" }, "user": { "type": "string" }, "preemptor": { "type": "integer", "nullable": true }, "preemptor_account": { "type": "string", "nullable": true }, "reason": { "$ref": "#/components/schemas/PreemptionReason" }, "at": { "type": "integer" }, "gpus": { "type": "integer" }, "run_start": { "type": "integer", "nullable": true }, "gpu_hours": { "type": "number" }, "source": { "type": "string" }, "gpu_type": { "type": "string", "nullable": true, "description": "GPU type of the lost run from the ledger (null: untyped or no longer there); lost-work budgets charge gpu_hours times its billing weight." } } } },
        "by_account": { "type": "array", "items": { "type": "object", "required": ["account", "preemptions", "gpu_hours_lost", "by_reason"], "additionalProperties": false, "properties": { "account": { "type": "string" }, "preemptions": { "type": "integer" }, "gpu_hours_lost": { "type": "number" }, "by_reason": { "type": "object", "additionalProperties": { "type": "integer" } } } } } } },
      "IdleReport": { "type": "object", "required": ["at", "from", "threshold_secs", "stale_after_secs", "flagged", "by_account", "nodes"], "additionalProperties": false, "properties": { "at": { "type": "integer" }, "from": { "type": "integer" }, "threshold_secs": { "type": "integer" }, "stale_after_secs": { "type": "integer" }, "flagged": { "type": "array", "items": { "type": "object" } }, "by_account": { "type": "array", "items": { "type": "object" } }, "nodes": { "type": "array", "items": { "type": "object" } } } },
      "ReportOutcome": { "type": "object", "required": ["node", "latest_replaced", "streaks_inserted", "streaks_extended", "streaks_unchanged", "streaks_broken"], "additionalProperties": false, "properties": { "node": { "type": "string" }, "latest_replaced": { "type": "boolean" }, "streaks_inserted": { "type": "integer" }, "streaks_extended": { "type": "integer" }, "streaks_unchanged": { "type": "integer" }, "streaks_broken": { "type": "integer" }, "streaks_pruned": { "type": "integer" } } },
      "PluginsState": { "type": "object", "required": ["applied_generation", "generation", "horizon_secs", "plugins"], "additionalProperties": false, "properties": { "applied_generation": { "type": "integer" }, "generation": { "type": "integer" }, "horizon_secs": { "type": "integer" },
        "plugins": { "type": "array", "items": { "type": "object", "required": ["fetched_at", "generation", "plugin"], "additionalProperties": false, "properties": { "fetched_at": { "type": "integer" }, "generation": { "type": "integer" }, "period_secs": { "type": "integer" }, "plugin": { "type": "string" } } } } } },
      "PluginSnapshot": { "type": "object", "description": "budget_protocol::PluginSnapshot", "required": ["version", "generated_at", "policy", "weights", "fair_share"], "properties": { "version": { "type": "string" }, "generated_at": { "type": "integer" }, "policy": { "$ref": "#/components/schemas/Policy" }, "weights": { "$ref": "#/components/schemas/Weights" }, "fair_share": { "type": "object" }, "drains": { "type": "array" }, "cluster_gpus": { "type": "integer", "minimum": 1, "description": "GPUs of the nodes that can run jobs, from scontrol show node (absent: unknown); raw, the capacity a previous release's budgetd published." }, "cluster_weighted_gpus": { "type": "number", "minimum": 0, "exclusiveMinimum": true, "description": "The same GPUs weighted: each node's GPUs x the billing weight of their Gres type under weights (untyped: the default weight), in the unit of the allocations (absent: unknown); the cost-aware rule scales entitlements to it." } } },
      "JobSync": { "type": "object", "description": "budget_protocol::JobSync; each run is checked on its own (a run out of bounds is listed in SyncOutcome.refused, the others stored)", "required": ["collected_at", "runs"], "additionalProperties": false, "properties": { "collected_at": { "type": "integer", "minimum": -9223372036854775808, "maximum": 9223372036854775807 }, "runs": { "type": "array", "items": { "$ref": "#/components/schemas/JobRun" } }, "live": { "type": "array", "nullable": true, "description": "the complete set of jobs Slurm had: [job_id, submit time of its current run (0: unknown)]", "items": { "type": "array", "minItems": 2, "maxItems": 2, "items": { "type": "integer", "minimum": 0, "maximum": 4294967295 } } }, "queue": { "$ref": "#/components/schemas/QueueOrder" } } },
      "QueueOrder": { "type": "object", "nullable": true, "description": "budget_protocol::shadow::QueueOrder: site_factor/budget in mode=shadow, the pending queue with Slurm's priority and the budget placement of each job (at most 5000); recorded at most once every shadow_sample_secs", "required": ["num_leaves", "jobs"], "additionalProperties": false, "properties": { "num_leaves": { "type": "integer", "minimum": 0, "maximum": 4294967295 }, "jobs": { "type": "array", "items": { "type": "object", "required": ["job_id", "priority", "tier", "rank"], "additionalProperties": false, "properties": { "job_id": { "type": "integer", "minimum": 0, "maximum": 4294967295 }, "priority": { "type": "integer", "minimum": 0, "maximum": 4294967295 }, "tier": { "type": "string", "enum": ["budgeted", "over_budget", "free"] }, "rank": { "type": "integer", "minimum": 0, "maximum": 4294967295 } } } } } },
      "ShadowReport": { "type": "object", "description": "budget_protocol::shadow::ShadowReport", "required": ["since", "at", "order", "preemptions", "lost_gpu_hours", "shortfall"], "additionalProperties": false, "properties": { "since": { "type": "integer" }, "at": { "type": "integer" }, "order": { "type": "object" }, "preemptions": { "type": "array", "items": { "type": "object" } }, "lost_gpu_hours": { "type": "number" }, "shortfall": { "type": "array", "items": { "type": "object" } } } },
      "LedgerRun": { "type": "object", "description": "budget_protocol::runs::LedgerRun: one ledger row", "required": ["job_id", "run", "submit", "rerun", "account", "user", "gpus", "gpu_type", "start", "end", "state", "free_tier", "min_runtime_secs", "time_limit_secs", "checkpoint_secs", "nodes"], "additionalProperties": false, "properties": { "job_id": { "type": "integer", "minimum": 0, "maximum": 4294967295 }, "run": { "type": "integer", "minimum": 0, "maximum": 4294967295 }, "submit": { "type": "integer", "minimum": -9223372036854775808, "maximum": 9223372036854775807 }, "rerun": { "type": "integer", "minimum": 0, "maximum": 4294967295 }, "account": { "type": "string" }, "user": { "type": "string" }, "gpus": { "type": "integer", "minimum": 0, "maximum": 4294967295 }, "gpu_type": { "type": "string", "nullable": true }, "start": { "type": "integer", "minimum": -9223372036854775808, "maximum": 9223372036854775807, "nullable": true }, "end": { "type": "integer", "minimum": -9223372036854775808, "maximum": 9223372036854775807, "nullable": true }, "state": { "type": "string", "enum": ["pending", "running", "ended", "requeued"] }, "free_tier": { "type": "boolean" }, "min_runtime_secs": { "type": "integer", "minimum": -9223372036854775808, "maximum": 9223372036854775807 }, "time_limit_secs": { "type": "integer", "minimum": -9223372036854775808, "maximum": 9223372036854775807, "nullable": true }, "checkpoint_secs": { "type": "integer", "minimum": -9223372036854775808, "maximum": 9223372036854775807, "nullable": true }, "nodes": { "type": "string", "nullable": true } } },
      "RunsReport": { "type": "object", "description": "budget_protocol::runs::RunsReport", "required": ["since", "until", "window_secs", "cluster_gpus", "hidden", "runs"], "additionalProperties": false, "properties": { "since": { "type": "integer", "minimum": -9223372036854775808, "maximum": 9223372036854775807 }, "until": { "type": "integer", "minimum": -9223372036854775808, "maximum": 9223372036854775807 }, "window_secs": { "type": "integer", "minimum": -9223372036854775808, "maximum": 9223372036854775807 }, "cluster_gpus": { "type": "integer", "minimum": 0, "maximum": 4294967295, "nullable": true }, "hidden": { "type": "integer", "minimum": 0 }, "runs": { "type": "array", "items": { "$ref": "#/components/schemas/LedgerRun" } } } },
      "JobRun": { "type": "object", "description": "budget_protocol::JobRun", "required": ["job_id", "run", "account", "user", "gpus", "state"], "additionalProperties": false, "properties": { "job_id": { "type": "integer", "minimum": 0, "maximum": 4294967295 }, "run": { "type": "integer", "minimum": 0, "maximum": 4294967295 }, "submit": { "type": "integer", "minimum": -9223372036854775808, "maximum": 9223372036854775807, "nullable": true }, "account": { "type": "string" }, "user": { "type": "string" }, "partition": { "type": "string", "nullable": true }, "gpus": { "type": "integer", "minimum": 0, "maximum": 4294967295 }, "gpu_type": { "type": "string", "nullable": true }, "start": { "type": "integer", "minimum": -9223372036854775808, "maximum": 9223372036854775807, "nullable": true }, "end": { "type": "integer", "minimum": -9223372036854775808, "maximum": 9223372036854775807, "nullable": true }, "state": { "type": "string", "enum": ["pending", "running", "ended", "requeued"] }, "free_tier": { "type": "boolean" }, "min_runtime_secs": { "type": "integer", "minimum": -9223372036854775808, "maximum": 9223372036854775807 }, "nodes": { "type": "string", "nullable": true }, "priority": { "type": "integer", "minimum": 0, "maximum": 4294967295, "nullable": true }, "reason": { "type": "string", "nullable": true }, "time_limit_secs": { "type": "integer", "minimum": -9223372036854775808, "maximum": 9223372036854775807, "nullable": true }, "checkpoint_secs": { "type": "integer", "minimum": -9223372036854775808, "maximum": 9223372036854775807, "nullable": true } } },
      "AgentReport": { "type": "object", "description": "budget_protocol::AgentReport; also refused (422): at more than 300 s ahead of budgetd's clock, GPUs with nvml false, a GPU listed twice, idle_secs not below at", "required": ["node", "at", "nvml", "gpus"], "additionalProperties": false, "properties": { "node": { "type": "string", "pattern": "^[A-Za-z0-9_.:-]{1,128}$" }, "at": { "type": "integer", "minimum": 1, "maximum": 4102444800 }, "nvml": { "type": "boolean" },
        "gpus": { "type": "array", "maxItems": 64, "items": { "type": "object", "required": ["index", "uuid", "name", "util_pct", "memory_used_mib", "memory_total_mib", "processes", "idle_secs"], "additionalProperties": false, "properties": { "index": { "type": "integer", "minimum": 0, "maximum": 4294967295 }, "uuid": { "type": "string", "pattern": "^[A-Za-z0-9_.:-]{1,128}$" }, "name": { "type": "string" }, "util_pct": { "type": "integer", "minimum": 0, "maximum": 100 }, "memory_used_mib": { "type": "integer", "minimum": 0, "maximum": 18446744073709551615 }, "memory_total_mib": { "type": "integer", "minimum": 0, "maximum": 18446744073709551615 }, "idle_secs": { "type": "integer", "minimum": 0, "maximum": 9223372036854775807 },
          "processes": { "type": "array", "maxItems": 256, "items": { "type": "object", "required": ["pid"], "additionalProperties": false, "properties": { "pid": { "type": "integer", "minimum": 0, "maximum": 4294967295 }, "job_id": { "type": "integer", "minimum": 0, "maximum": 4294967295, "nullable": true }, "used_memory_mib": { "type": "integer", "minimum": 0, "maximum": 18446744073709551615, "nullable": true }, "sm_util_pct": { "type": "integer", "minimum": 0, "maximum": 4294967295, "nullable": true } } } } } } } } },
      "SyncOutcome": { "type": "object", "required": ["inserted", "updated", "unchanged"], "additionalProperties": false, "properties": { "inserted": { "type": "integer" }, "updated": { "type": "integer" }, "unchanged": { "type": "integer" }, "closed": { "type": "integer", "description": "runs Slurm no longer had (a complete live set), closed" }, "refused": { "type": "array", "items": { "$ref": "#/components/schemas/RefusedRun" } } } }
    }
  },
  "security": [ { "bearer": [] } ],
  "paths": {
    "/v1/health": { "get": { "summary": "Liveness and versions (no authentication).", "security": [], "responses": { "200": { "description": "ok", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Health" } } } } } } },
    "/v1/openapi.json": { "get": { "summary": "This document (no authentication).", "security": [], "responses": { "200": { "description": "OpenAPI 3 document" } } } },
    "/v1/accounts": {
      "get": { "summary": "Accounts the caller may read.", "responses": { "200": { "description": "accounts", "content": { "application/json": { "schema": { "type": "array", "items": { "$ref": "#/components/schemas/AccountRow" } } } } } } },
      "post": { "summary": "Create an account (admin, or coordinator of the parent's subtree).", "requestBody": { "required": true, "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Account" } } } },
        "responses": { "201": { "description": "created", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/AccountRow" } } } }, "409": { "description": "duplicate" }, "422": { "description": "unknown parent, cycle, bad allocation, children above parent" } } }
    },
    "/v1/accounts/{name}": {
      "parameters": [ { "name": "name", "in": "path", "required": true, "schema": { "type": "string" } } ],
      "get": { "summary": "One account with children, members and coordinators.", "responses": { "200": { "description": "account", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/AccountDetail" } } } }, "403": { "description": "not yours" }, "404": { "description": "unknown" } } },
      "patch": { "summary": "Change allocation, parent or overcommit (admin, or coordinator of an ancestor).", "requestBody": { "required": true, "content": { "application/json": { "schema": { "$ref": "#/components/schemas/AccountPatch" } } } }, "responses": { "200": { "description": "the new account", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/AccountRow" } } } }, "404": { "description": "unknown account" }, "422": { "description": "unknown parent, cycle, bad allocation, children above parent" } } },
      "delete": { "summary": "Delete an account without children or running jobs.", "responses": { "204": { "description": "deleted" }, "409": { "description": "has children or running jobs" } } }
    },
    "/v1/members": {
      "get": { "summary": "Memberships (filter with ?account=).", "parameters": [ { "name": "account", "in": "query", "schema": { "type": "string" } } ], "responses": { "200": { "description": "memberships", "content": { "application/json": { "schema": { "type": "array", "items": { "$ref": "#/components/schemas/MemberRow" } } } } } } },
      "post": { "summary": "Add a user to an account.", "requestBody": { "required": true, "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Member" } } } }, "responses": { "201": { "description": "added", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/MemberRow" } } } }, "404": { "description": "unknown account" }, "409": { "description": "already a member" }, "422": { "description": "explicit allocations above the account's" } } }
    },
    "/v1/members/{account}/{user}": {
      "parameters": [ { "name": "account", "in": "path", "required": true, "schema": { "type": "string" } }, { "name": "user", "in": "path", "required": true, "schema": { "type": "string" } } ],
      "patch": { "summary": "Set a member's explicit allocation ({\"allocation_gpu_hours\": number}; null: share the account's rest equally).", "requestBody": { "required": true, "content": { "application/json": { "schema": { "type": "object", "required": ["allocation_gpu_hours"], "properties": { "allocation_gpu_hours": { "type": "number", "minimum": 0, "maximum": 1e9, "nullable": true } }, "additionalProperties": false } } } }, "responses": { "200": { "description": "the new Member", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/MemberRow" } } } }, "404": { "description": "not a member" }, "422": { "description": "bad allocation or above the account's" } } },
      "delete": { "summary": "Remove a user from an account.", "responses": { "204": { "description": "removed" } } }
    },
    "/v1/coordinators": {
      "get": { "summary": "Coordinators (filter with ?account=).", "parameters": [ { "name": "account", "in": "query", "schema": { "type": "string" } } ], "responses": { "200": { "description": "coordinators", "content": { "application/json": { "schema": { "type": "array", "items": { "$ref": "#/components/schemas/Coordinator" } } } } } } },
      "post": { "summary": "Make a user coordinator of an account.", "requestBody": { "required": true, "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Coordinator" } } } }, "responses": { "201": { "description": "added" } } }
    },
    "/v1/coordinators/{account}/{user}": {
      "parameters": [ { "name": "account", "in": "path", "required": true, "schema": { "type": "string" } }, { "name": "user", "in": "path", "required": true, "schema": { "type": "string" } } ],
      "delete": { "summary": "Remove a coordinator.", "responses": { "204": { "description": "removed" } } }
    },
    "/v1/weights": {
      "get": { "summary": "GPU-type billing weights.", "responses": { "200": { "description": "Weights", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Weights" } } } } } },
      "patch": { "summary": "Set weights (admin).", "requestBody": { "required": true, "content": { "application/json": { "schema": { "$ref": "#/components/schemas/WeightsPatch" } } } }, "responses": { "200": { "description": "the new weights", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Weights" } } } } } }
    },
    "/v1/policy": {
      "get": { "summary": "Site policy.", "responses": { "200": { "description": "Policy", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Policy" } } } } } },
      "patch": { "summary": "Change policy fields (admin): the min_runtime default and maximum, require_min_runtime, the preemption preset, the site caps, max_requeues, the window, snapshot_max_age_secs and idle_threshold_secs; default_min_runtime_secs may not exceed max_min_runtime_secs, either of them stored (422). null clears a site cap and puts max_requeues back to the rule's default. A field that is a constant of the rule (hysteresis, tier_band, tier_projection, share_order, entitled_first, balance_band) is refused (422, naming it) and nothing changes.", "requestBody": { "required": true, "content": { "application/json": { "schema": { "$ref": "#/components/schemas/PolicyPatch" } } } }, "responses": { "200": { "description": "the new policy", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Policy" } } } } } }
    },
    "/v1/audit": { "get": { "summary": "Append-only audit log (admins, readers).", "parameters": [ { "name": "after", "in": "query", "description": "entries with a larger id (default 0: from the first)", "schema": { "type": "integer", "minimum": -9223372036854775808, "maximum": 9223372036854775807 } }, { "name": "limit", "in": "query", "description": "at most this many entries (default 1000; taken as 1 below 1 and as 100000 above it)", "schema": { "type": "integer", "minimum": -9223372036854775808, "maximum": 9223372036854775807 } } ], "responses": { "200": { "description": "entries, oldest first", "content": { "application/json": { "schema": { "type": "array", "items": { "$ref": "#/components/schemas/AuditEntry" } } } } } } } },
    "/v1/usage": { "get": { "summary": "Usage by account (descendants included) or by user, over [since, at] (default: the window ending at at; since after at: 400).",
      "parameters": [ { "name": "by", "in": "query", "schema": { "type": "string", "enum": ["account", "user"] } }, { "name": "since", "in": "query", "schema": { "$ref": "#/components/schemas/Time" } }, { "name": "at", "in": "query", "schema": { "$ref": "#/components/schemas/Time" } } ],
      "responses": { "200": { "description": "usage rows", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/UsageReport" } } } } } } },
    "/v1/usage/import": { "post": { "summary": "Import sacct -X -D -P -o JobID,Account,User,Partition,AllocTRES,Start,End,State output (admin). Idempotent.",
      "parameters": [ { "name": "skip_invalid", "in": "query", "schema": { "type": "boolean" } }, { "name": "tz", "in": "query", "schema": { "type": "string", "pattern": "^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+)*$" }, "description": "IANA zone of sacct times (default: budgetd's own)" } ],
      "requestBody": { "required": true, "content": { "text/plain": { "schema": { "type": "string", "minLength": 1, "description": "a sacct header line, then one line a job" } } } },
      "responses": { "200": { "description": "what the import changed", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/ImportReport" } } } }, "400": { "description": "tz not in the zone database" }, "422": { "description": "invalid lines (with line numbers); nothing imported" } } } },
    "/v1/share": { "get": { "summary": "The sshare-like fair-share table at ?at= (default now).", "parameters": [ { "name": "at", "in": "query", "schema": { "$ref": "#/components/schemas/Time" } } ],
      "responses": { "200": { "description": "the fair-share table", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/ShareReport" } } } } } } },
    "/v1/backup": { "post": { "summary": "Write a consistent copy of the database (SQLite online backup API) to an absolute path on budgetd's host (admin), inside its backup folder (backup_dir; default: backups beside the database). Body budget_protocol::service::BackupRequest {path, overwrite}; an existing file is refused (409) unless overwrite; the database's own files (-wal, -shm, -journal included) and the socket are always refused (422). Answers BackupReport: generation, last audit id and runs of the copy.", "responses": { "200": { "description": "BackupReport" }, "409": { "description": "the file exists" }, "422": { "description": "bad path, outside the backup folder, one of budgetd's own files, missing folder, write failure" } } } },
    "/v1/plugins": { "get": { "summary": "Which store generation each slurmctld plugin holds (from their snapshot requests' X-Budget-Plugin header) and applied_generation, the lowest among those seen within horizon_secs: every change up to it is in effect in slurmctld (any authenticated caller).", "responses": { "200": { "description": "PluginsState", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/PluginsState" } } } } } } },
    "/v1/snapshot": { "get": { "summary": "budget_protocol::PluginSnapshot (controller: slurmctld's plugins, as SlurmUser or root on the socket or with a role=controller token). ETag = version; If-None-Match gives 304. A plugin names itself in X-Budget-Plugin: NAME period=SECS.", "responses": { "200": { "description": "PluginSnapshot", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/PluginSnapshot" } } } }, "304": { "description": "unchanged" } } } },
    "/v1/sync/jobs": { "post": { "summary": "Job-state sync from the plugin (controller); idempotent; taken run by run (refused runs listed).", "requestBody": { "required": true, "content": { "application/json": { "schema": { "$ref": "#/components/schemas/JobSync" } } } },
      "responses": { "200": { "description": "SyncOutcome", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/SyncOutcome" } } } } } } },
    "/v1/jobs/{id}/why": { "get": { "summary": "Explain a job: tier, rank path with ratios, fair-share factor, priority parts, protection, preemption peers.",
      "parameters": [ { "name": "id", "in": "path", "required": true, "schema": { "type": "integer", "minimum": 0, "maximum": 4294967295 } } ], "responses": { "200": { "description": "Why", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Why" } } } }, "404": { "description": "not in the ledger" } } } },
    "/v1/drains": {
      "get": { "summary": "Drained nodes, from the drain worker's last reading of Slurm (at most 10 s old; no Slurm call per request), with Slurm's state, the jobs holding each, when each job leaves it (requeued now for free tier, else at its window end; a job of a PreemptMode=OFF partition is never requeued and runs to its time limit) and when the node will be empty (the last of these).", "responses": { "200": { "description": "drained nodes", "content": { "application/json": { "schema": { "type": "array", "items": { "$ref": "#/components/schemas/DrainStatus" } } } } }, "503": { "description": "the drain worker has not read Slurm in the last 10 s (Slurm unreachable) or not yet" } } },
      "post": { "summary": "Drain nodes (admin): {\"nodes\": \"gpu[1-2]\", \"reason\": \"text\"}. Sets Slurm DRAIN (reason \"budget: text\"); budgetd requeues each job as soon as its contract allows.", "requestBody": { "required": true, "content": { "application/json": { "schema": { "$ref": "#/components/schemas/DrainRequest" } } } }, "responses": { "201": { "description": "status of the drained nodes", "content": { "application/json": { "schema": { "type": "array", "items": { "$ref": "#/components/schemas/DrainStatus" } } } } }, "403": { "description": "not an admin" }, "409": { "description": "Slurm refused the drain (error: \"Slurm refused this request: <Slurm's own message>\", e.g. slurm_update error: Invalid node name specified); what Slurm had applied is undone, and what could not be is named in the message" }, "422": { "description": "bad hostlist, unknown node (with Slurm's own words) or bad reason; nothing changed" }, "502": { "description": "Slurm could not be reached (error: \"could not reach Slurm: ...\"); nothing stored, what Slurm may have applied is undone or named" } } }
    },
    "/v1/drains/{nodes}": {
      "parameters": [ { "name": "nodes", "in": "path", "required": true, "schema": { "$ref": "#/components/schemas/Hostlist" } } ],
      "delete": { "summary": "Undrain nodes (admin): Slurm state=resume (of the nodes Slurm holds drained) and the drain forgotten. A list naming a node budgetd has not drained is answered 404 before Slurm is asked anything.", "responses": { "200": { "description": "undrained" }, "404": { "description": "names a node budgetd has not drained, or is no hostlist budgetd can read (nothing asked of Slurm)" }, "409": { "description": "Slurm refused the resume (error: \"Slurm refused this request: <Slurm's own message>\"); the drain stays in force, nodes Slurm resumed anyway are drained again" }, "422": { "description": "a node Slurm no longer knows (with Slurm's own words)" }, "502": { "description": "Slurm could not be reached (error: \"could not reach Slurm: ...\"); the drain stays" } } }
    },
    "/v1/preemptions": {
      "get": { "summary": "Preemption record since ?since= (admins, readers): victim run, preemptor, reason (free_tier, over_budget, rebalance, drain, partition_tier, qos), GPU-hours of the lost run; totals per account.", "parameters": [ { "name": "since", "in": "query", "schema": { "$ref": "#/components/schemas/Time" } } ], "responses": { "200": { "description": "rows and by_account", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/PreemptionReport" } } } } } },
      "post": { "summary": "Record a preemption (controller; preempt/budget's thread). Idempotent by (victim, run). A run the ledger lacks needs account, user, gpus and start (422).", "requestBody": { "required": true, "content": { "application/json": { "schema": { "$ref": "#/components/schemas/PreemptionRecord" } } } }, "responses": { "200": { "description": "{inserted: bool}", "content": { "application/json": { "schema": { "type": "object", "required": ["inserted"], "additionalProperties": false, "properties": { "inserted": { "type": "boolean" } } } } } } } }
    },
    "/v1/agent/report": { "post": { "summary": "A node agent's report (budget_protocol::AgentReport; unknown fields refused; at most body_limit_bytes). Admins (the agent as root on the socket) or role=agent tokens over TCP. Stores the node's latest report and the idle streaks per (job, GPU); repeating a report changes nothing.",
      "requestBody": { "required": true, "content": { "application/json": { "schema": { "$ref": "#/components/schemas/AgentReport" } } } },
      "responses": { "200": { "description": "what the report changed", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/ReportOutcome" } } } }, "403": { "description": "neither admin nor agent" }, "413": { "description": "body too large; nothing stored" }, "422": { "description": "unknown field, bad node/uuid, time from the future, duplicate GPU; nothing stored" } } } },
    "/v1/idle": { "get": { "summary": "Jobs idle beyond policy idle_threshold_secs in their nodes' latest (non-stale) reports, with account, user, nodes, idle GPUs and since when; idle GPU-hours per job account over [since, at] (default: the window ending at at; since after at: 400); latest report per node (admins, readers). Coordinators see their subtrees' jobs, users their own and their accounts'.",
      "parameters": [ { "name": "since", "in": "query", "schema": { "$ref": "#/components/schemas/Time" } }, { "name": "at", "in": "query", "schema": { "$ref": "#/components/schemas/Time" } } ],
      "responses": { "200": { "description": "flagged jobs, idle GPU-hours by account, latest report per node", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/IdleReport" } } } } } } },
    "/v1/shadow": { "get": { "summary": "Shadow mode over [since, at] (default: the window ending at at; since after at: 400): how Slurm's order of the pending jobs differs from the budget order (pairs ordered the other way, Kendall tau-b, the jobs furthest apart), the preemptions the cost-aware rule would have made with the work they would have lost, and each account's shortfall against the rule's target. Readers see everything; others the jobs and accounts they may see.",
      "parameters": [ { "name": "since", "in": "query", "schema": { "$ref": "#/components/schemas/Time" } }, { "name": "at", "in": "query", "schema": { "$ref": "#/components/schemas/Time" } } ],
      "responses": { "200": { "description": "the shadow report", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/ShadowReport" } } } } } } },
    "/v1/runs": { "get": { "summary": "The ledger's runs with a start, end or submit in [since, until] or open across it (default: the window ending now; at most 366 days; since after until: 400), with submit time, GPUs, time limit, contract, free tier and checkpoint, the cluster's GPUs (the snapshot's cluster_gpus) and the window: what budgetctl whatif replays. Admins and readers see every run, coordinators their subtrees' runs, users their own and their accounts'; hidden counts the runs left out.",
      "parameters": [ { "name": "since", "in": "query", "schema": { "$ref": "#/components/schemas/Time" } }, { "name": "until", "in": "query", "schema": { "$ref": "#/components/schemas/Time" } } ],
      "responses": { "200": { "description": "runs", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/RunsReport" } } } } } } },
    "/metrics": { "get": { "summary": "Prometheus text metrics (admins, readers).", "responses": { "200": { "description": "text/plain; version=0.0.4" } } } }
  }
}"##;

/// The document as `GET /v1/openapi.json` serves it: [`DOCUMENT`] with the
/// `4XX` and `5XX` error responses added to every operation that does not
/// list them.
pub fn served() -> &'static str {
    static SERVED: OnceLock<String> = OnceLock::new();
    SERVED.get_or_init(|| {
        let Ok(mut doc) = serde_json::from_str::<serde_json::Value>(DOCUMENT) else {
            // A unit test parses DOCUMENT; never reached in a build that passed it.
            return DOCUMENT.to_string();
        };
        let error = serde_json::json!({ "$ref": "#/components/responses/Error" });
        let shared = doc["components"]["responses"].clone();
        if let Some(paths) = doc.get_mut("paths").and_then(|p| p.as_object_mut()) {
            for item in paths.values_mut() {
                let Some(item) = item.as_object_mut() else {
                    continue;
                };
                for (method, op) in item.iter_mut() {
                    if !["get", "post", "patch", "put", "delete"].contains(&method.as_str()) {
                        continue;
                    }
                    let open = op["security"].as_array().is_some_and(Vec::is_empty);
                    if let Some(responses) = op.get_mut("responses").and_then(|r| r.as_object_mut())
                    {
                        for range in ["4XX", "5XX"] {
                            responses.entry(range).or_insert_with(|| error.clone());
                        }
                        // Refusals before any handler, on every route alike.
                        if !open {
                            add_refusal(responses, &shared, "403", "Forbidden");
                        }
                        add_refusal(responses, &shared, "503", "Unavailable");
                    }
                }
            }
        }
        serde_json::to_string_pretty(&doc).unwrap_or_else(|_| DOCUMENT.to_string())
    })
}

/// What the schema of a JSON request body says of its top-level fields
/// that serde alone does not check (see [`body_fields`]).
#[derive(Debug, Default)]
pub struct BodyFields {
    /// Optional fields not marked nullable: `null` is refused, not read as absent.
    pub not_null: Vec<String>,
    /// Required fields marked nullable: absence is refused, not read as `null`.
    pub present: Vec<String>,
}

/// [`BodyFields`] of the JSON request body of `method path` (a route as the
/// router names it, e.g. `/v1/accounts/{name}`): `crate::api`'s body
/// extractor refuses what the schema refuses.
pub fn body_fields(method: &str, path: &str) -> &'static BodyFields {
    static NONE: BodyFields = BodyFields {
        not_null: Vec::new(),
        present: Vec::new(),
    };
    static FIELDS: OnceLock<HashMap<(String, String), BodyFields>> = OnceLock::new();
    FIELDS
        .get_or_init(|| {
            let doc: serde_json::Value = serde_json::from_str(served()).unwrap_or_default();
            let mut out = HashMap::new();
            let Some(paths) = doc["paths"].as_object() else {
                return out;
            };
            for (route, item) in paths {
                let Some(item) = item.as_object() else {
                    continue;
                };
                for (m, op) in item {
                    let schema = &op["requestBody"]["content"]["application/json"]["schema"];
                    if schema.is_null() {
                        continue;
                    }
                    let mut fields = BodyFields::default();
                    collect_body_fields(&doc, schema, &mut fields);
                    out.insert((m.to_ascii_uppercase(), route.clone()), fields);
                }
            }
            out
        })
        .get(&(method.to_ascii_uppercase(), path.to_string()))
        .unwrap_or(&NONE)
}

/// `schema` with its `$ref` followed (within this document).
fn resolve<'a>(doc: &'a serde_json::Value, schema: &'a serde_json::Value) -> &'a serde_json::Value {
    match schema["$ref"].as_str() {
        Some(r) => r
            .strip_prefix("#/")
            .map_or(schema, |p| doc.pointer(&format!("/{p}")).unwrap_or(schema)),
        None => schema,
    }
}

fn collect_body_fields(doc: &serde_json::Value, schema: &serde_json::Value, out: &mut BodyFields) {
    let schema = resolve(doc, schema);
    if let Some(parts) = schema["allOf"].as_array() {
        for part in parts {
            collect_body_fields(doc, part, out);
        }
    }
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|r| r.iter().filter_map(|v| v.as_str()).collect())
        .unwrap_or_default();
    if let Some(props) = schema["properties"].as_object() {
        for (name, prop) in props {
            // A property may be nullable through the schema it references
            // (`$ref` to a nullable component), as schemathesis reads it.
            let nullable = prop["nullable"] == true || resolve(doc, prop)["nullable"] == true;
            match (required.contains(&name.as_str()), nullable) {
                (false, false) => out.not_null.push(name.clone()),
                (true, true) => out.present.push(name.clone()),
                _ => {}
            }
        }
    }
}

/// Lists the refusal `status` ([`DOCUMENT`]'s response `name`) on an
/// operation: the shared response where the operation lists none, else the
/// operation's own description followed by the shared one.
fn add_refusal(
    responses: &mut serde_json::Map<String, serde_json::Value>,
    shared: &serde_json::Value,
    status: &str,
    name: &str,
) {
    let shared = &shared[name];
    match responses.get_mut(status) {
        None => {
            responses.insert(
                status.to_string(),
                serde_json::json!({ "$ref": format!("#/components/responses/{name}") }),
            );
        }
        Some(own) => {
            let text = format!(
                "{}; or {}",
                own["description"].as_str().unwrap_or_default(),
                shared["description"].as_str().unwrap_or_default()
            );
            own["description"] = serde_json::Value::String(text);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_document_parses_and_every_operation_lists_its_errors() {
        let doc: serde_json::Value =
            serde_json::from_str(super::DOCUMENT).expect("DOCUMENT is JSON");
        assert_eq!(doc["openapi"], "3.0.3");
        let served: serde_json::Value =
            serde_json::from_str(super::served()).expect("served is JSON");
        let mut ops = 0;
        for (path, item) in served["paths"].as_object().expect("paths") {
            for (method, op) in item.as_object().expect("path item") {
                if method == "parameters" {
                    continue;
                }
                ops += 1;
                for range in ["4XX", "5XX", "503"] {
                    assert!(
                        op["responses"][range].is_object(),
                        "{method} {path}: no {range}"
                    );
                }
                let open = op["security"].as_array().is_some_and(Vec::is_empty);
                assert_eq!(
                    op["responses"]["403"].is_object(),
                    !open,
                    "{method} {path}: 403 listed on a route without authentication, or missing"
                );
            }
        }
        assert!(ops > 30, "{ops} operations");
    }

    /// The bounds the document states are the ones budgetd enforces, so a
    /// schema-valid request is never refused for its size alone.
    #[test]
    fn the_stated_bounds_are_the_enforced_ones() {
        let doc: serde_json::Value =
            serde_json::from_str(super::DOCUMENT).expect("DOCUMENT is JSON");
        let schemas = &doc["components"]["schemas"];
        let max = |v: &serde_json::Value| v["maximum"].as_f64().expect("maximum");
        assert_eq!(
            max(&schemas["GpuHours"]),
            policy_core::tree::MAX_ALLOCATION_GPU_HOURS
        );
        assert_eq!(max(&schemas["Weight"]), policy_core::weights::MAX_WEIGHT);
        let policy = &schemas["Policy"]["properties"];
        let duration = policy_core::duration::MAX_DURATION_SECS as f64;
        for f in [
            "window_secs",
            "default_min_runtime_secs",
            "max_min_runtime_secs",
            "idle_threshold_secs",
        ] {
            assert_eq!(max(&policy[f]), duration, "{f}");
        }
        assert_eq!(
            max(&policy["site_max_lost_gpu_hours"]),
            policy_core::tree::MAX_ALLOCATION_GPU_HOURS
        );
        let time = crate::ledger::MAX_TIME as f64;
        assert_eq!(max(&schemas["PreemptionRecord"]["properties"]["at"]), time);
        let report = &schemas["AgentReport"]["properties"];
        assert_eq!(max(&report["at"]), time);
        assert_eq!(report["gpus"]["maxItems"], crate::idle::MAX_GPUS_PER_REPORT);
        assert_eq!(
            report["gpus"]["items"]["properties"]["processes"]["maxItems"],
            crate::idle::MAX_PROCESSES_PER_GPU
        );
    }

    /// The Policy schema forbids other properties, so a policy field missing
    /// from it would make every conforming client refuse budgetd's answers.
    #[test]
    fn the_policy_schema_names_every_policy_field() {
        let doc: serde_json::Value =
            serde_json::from_str(super::DOCUMENT).expect("DOCUMENT is JSON");
        let schema = &doc["components"]["schemas"]["Policy"];
        assert_eq!(schema["additionalProperties"], false);
        let documented: Vec<&String> = schema["properties"]
            .as_object()
            .expect("properties")
            .keys()
            .collect();
        // Every optional field set, so each one is serialized.
        let full = budget_protocol::Policy {
            site_max_preemptions: Some(1),
            site_max_lost_gpu_hours: Some(1.0),
            max_requeues: Some(1),
            preemption: budget_protocol::PreemptionPreset::Gentle,
            ..Default::default()
        };
        let value = serde_json::to_value(full).expect("json");
        let mut fields: Vec<&String> = value.as_object().expect("object").keys().collect();
        let mut documented = documented;
        documented.sort();
        fields.sort();
        assert_eq!(documented, fields);
        // The preset's enum is the rule's presets.
        let names: Vec<&str> = budget_protocol::PreemptionPreset::ALL
            .iter()
            .map(|p| p.name())
            .collect();
        assert_eq!(
            schema["properties"]["preemption"]["enum"],
            serde_json::json!(names)
        );
    }

    /// A patch offers exactly the settable fields, each as the policy states
    /// it: the policy's fields but `hysteresis`, a constant of the rule that
    /// the policy carries only for plugins of the previous release.
    #[test]
    fn the_policy_patch_schema_is_the_policy_less_its_constants() {
        let doc: serde_json::Value =
            serde_json::from_str(super::DOCUMENT).expect("DOCUMENT is JSON");
        let schemas = &doc["components"]["schemas"];
        let mut policy = schemas["Policy"]["properties"].clone();
        let policy = policy.as_object_mut().expect("properties");
        for removed in budget_protocol::Policy::REMOVED {
            policy.remove(removed);
        }
        let patch = &schemas["PolicyPatch"];
        assert_eq!(
            &patch["properties"],
            &serde_json::Value::Object(policy.clone())
        );
        assert_eq!(
            (&patch["additionalProperties"], &patch["minProperties"]),
            (&serde_json::json!(false), &serde_json::json!(1))
        );
    }

    /// The PluginSnapshot schema names every field a snapshot serializes
    /// (every optional one set), the weighted capacity included.
    #[test]
    fn the_snapshot_schema_names_every_snapshot_field() {
        let doc: serde_json::Value =
            serde_json::from_str(super::DOCUMENT).expect("DOCUMENT is JSON");
        let schema = &doc["components"]["schemas"]["PluginSnapshot"];
        let mut documented: Vec<&String> = schema["properties"]
            .as_object()
            .expect("properties")
            .keys()
            .collect();
        let tree = policy_core::TreeSpec {
            root_allocation_gpu_hours: None,
            accounts: vec![],
            members: vec![],
        };
        let full = budget_protocol::PluginSnapshot {
            version: "1".into(),
            generated_at: 0,
            policy: Default::default(),
            weights: Default::default(),
            fair_share: policy_core::FairShare::compute(
                &tree,
                &Default::default(),
                0,
                policy_core::DEFAULT_WINDOW_SECS,
            ),
            drains: vec![],
            cluster_gpus: Some(12),
            cluster_weighted_gpus: Some(16.0),
        };
        let value = serde_json::to_value(full).expect("json");
        let mut fields: Vec<&String> = value.as_object().expect("object").keys().collect();
        documented.sort();
        fields.sort();
        assert_eq!(documented, fields);
        assert_eq!(
            schema["properties"]["cluster_weighted_gpus"]["type"],
            "number"
        );
    }
}
