//! The OpenAPI 3 document served at `GET /v1/openapi.json`, written by hand.
//!
//! A test (`tests/service/api.rs`) checks that every route of the router is
//! listed here with its methods, so the document cannot silently fall behind.

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
    "schemas": {
      "Error": { "type": "object", "required": ["error"], "properties": { "error": { "type": "string" }, "details": {} } },
      "Account": { "type": "object", "required": ["name", "allocation_gpu_hours"], "properties": {
        "name": { "type": "string" }, "parent": { "type": "string", "nullable": true, "description": "null or \"root\": top level" },
        "allocation_gpu_hours": { "type": "number", "minimum": 0 }, "overcommit": { "type": "boolean" } }, "additionalProperties": false },
      "AccountPatch": { "type": "object", "properties": { "allocation_gpu_hours": { "type": "number" }, "parent": { "type": "string" }, "overcommit": { "type": "boolean" } }, "additionalProperties": false },
      "Member": { "type": "object", "required": ["user", "account"], "properties": { "user": { "type": "string" }, "account": { "type": "string" }, "allocation_gpu_hours": { "type": "number", "nullable": true } }, "additionalProperties": false },
      "Coordinator": { "type": "object", "required": ["user", "account"], "properties": { "user": { "type": "string" }, "account": { "type": "string" } }, "additionalProperties": false },
      "Weights": { "type": "object", "properties": { "default": { "type": "number" }, "by_type": { "type": "object", "additionalProperties": { "type": "number" } } } },
      "WeightsPatch": { "type": "object", "properties": { "default": { "type": "number" }, "set": { "type": "object", "additionalProperties": { "type": "number" } } }, "additionalProperties": false },
      "Policy": { "type": "object", "properties": { "window_secs": { "type": "integer" }, "default_min_runtime_secs": { "type": "integer" }, "max_min_runtime_secs": { "type": "integer" }, "require_min_runtime": { "type": "boolean" }, "hysteresis": { "type": "number" }, "snapshot_max_age_secs": { "type": "integer" }, "idle_threshold_secs": { "type": "integer" }, "site_max_preemptions": { "type": "integer", "nullable": true, "description": "Site cap: rebalancing preemptions per window (absent or null: none)." }, "site_max_lost_gpu_hours": { "type": "number", "nullable": true, "description": "Site cap: GPU-hours lost to rebalancing per window (absent or null: none)." }, "max_requeues": { "type": "integer", "nullable": true, "description": "A job requeued this many times is no longer taken for rebalancing (absent or null: the rule's default, 1)." } }, "additionalProperties": false },
      "ShareRow": { "type": "object", "properties": { "account": { "type": "string" }, "parent": { "type": "string", "nullable": true }, "user": { "type": "string", "nullable": true }, "depth": { "type": "integer" }, "allocation_gpu_hours": { "type": "number" }, "usage_gpu_hours": { "type": "number" }, "free_usage_gpu_hours": { "type": "number" }, "ratio": { "type": "number" }, "rank": { "type": "integer", "description": "1 = lowest ratio among siblings" }, "leaf_rank": { "type": "integer", "nullable": true }, "fair_share_factor": { "type": "number" }, "tier": { "type": "string", "enum": ["budgeted", "over_budget", "free"] }, "overcommit": { "type": "boolean" } } },
      "JobSync": { "type": "object", "description": "budget_protocol::JobSync", "required": ["collected_at", "runs"], "properties": { "collected_at": { "type": "integer" }, "runs": { "type": "array", "items": { "type": "object" } } } },
      "AgentReport": { "type": "object", "description": "budget_protocol::AgentReport", "required": ["node", "at", "nvml", "gpus"], "additionalProperties": false, "properties": { "node": { "type": "string" }, "at": { "type": "integer" }, "nvml": { "type": "boolean" },
        "gpus": { "type": "array", "items": { "type": "object", "required": ["index", "uuid", "name", "util_pct", "memory_used_mib", "memory_total_mib", "processes", "idle_secs"], "additionalProperties": false, "properties": { "index": { "type": "integer" }, "uuid": { "type": "string" }, "name": { "type": "string" }, "util_pct": { "type": "integer" }, "memory_used_mib": { "type": "integer" }, "memory_total_mib": { "type": "integer" }, "idle_secs": { "type": "integer" },
          "processes": { "type": "array", "items": { "type": "object", "required": ["pid"], "additionalProperties": false, "properties": { "pid": { "type": "integer" }, "job_id": { "type": "integer", "nullable": true }, "used_memory_mib": { "type": "integer", "nullable": true }, "sm_util_pct": { "type": "integer", "nullable": true } } } } } } } } },
      "SyncOutcome": { "type": "object", "properties": { "inserted": { "type": "integer" }, "updated": { "type": "integer" }, "unchanged": { "type": "integer" }, "refused": { "type": "array", "items": { "type": "object", "properties": { "job_id": { "type": "integer" }, "run": { "type": "integer" }, "index": { "type": "integer" }, "error": { "type": "string" } } } } } }
    }
  },
  "security": [ { "bearer": [] } ],
  "paths": {
    "/v1/health": { "get": { "summary": "Liveness and versions (no authentication).", "security": [], "responses": { "200": { "description": "ok" } } } },
    "/v1/openapi.json": { "get": { "summary": "This document (no authentication).", "security": [], "responses": { "200": { "description": "OpenAPI 3 document" } } } },
    "/v1/accounts": {
      "get": { "summary": "Accounts the caller may read.", "responses": { "200": { "description": "list of Account" } } },
      "post": { "summary": "Create an account (admin, or coordinator of the parent's subtree).", "requestBody": { "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Account" } } } },
        "responses": { "201": { "description": "created" }, "409": { "description": "duplicate" }, "422": { "description": "unknown parent, cycle, bad allocation, children above parent" } } }
    },
    "/v1/accounts/{name}": {
      "parameters": [ { "name": "name", "in": "path", "required": true, "schema": { "type": "string" } } ],
      "get": { "summary": "One account with children, members and coordinators.", "responses": { "200": { "description": "account" }, "403": { "description": "not yours" }, "404": { "description": "unknown" } } },
      "patch": { "summary": "Change allocation, parent or overcommit (admin, or coordinator of an ancestor).", "requestBody": { "content": { "application/json": { "schema": { "$ref": "#/components/schemas/AccountPatch" } } } }, "responses": { "200": { "description": "the new account" } } },
      "delete": { "summary": "Delete an account without children or running jobs.", "responses": { "204": { "description": "deleted" }, "409": { "description": "has children or running jobs" } } }
    },
    "/v1/members": {
      "get": { "summary": "Memberships (filter with ?account=).", "parameters": [ { "name": "account", "in": "query", "schema": { "type": "string" } } ], "responses": { "200": { "description": "list of Member" } } },
      "post": { "summary": "Add a user to an account.", "requestBody": { "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Member" } } } }, "responses": { "201": { "description": "added" } } }
    },
    "/v1/members/{account}/{user}": {
      "parameters": [ { "name": "account", "in": "path", "required": true, "schema": { "type": "string" } }, { "name": "user", "in": "path", "required": true, "schema": { "type": "string" } } ],
      "patch": { "summary": "Set a member's explicit allocation ({\"allocation_gpu_hours\": number}; null: share the account's rest equally).", "requestBody": { "content": { "application/json": { "schema": { "type": "object", "properties": { "allocation_gpu_hours": { "type": "number", "nullable": true } }, "additionalProperties": false } } } }, "responses": { "200": { "description": "the new Member" }, "404": { "description": "not a member" }, "422": { "description": "bad allocation or above the account's" } } },
      "delete": { "summary": "Remove a user from an account.", "responses": { "204": { "description": "removed" } } }
    },
    "/v1/coordinators": {
      "get": { "summary": "Coordinators (filter with ?account=).", "parameters": [ { "name": "account", "in": "query", "schema": { "type": "string" } } ], "responses": { "200": { "description": "list of Coordinator" } } },
      "post": { "summary": "Make a user coordinator of an account.", "requestBody": { "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Coordinator" } } } }, "responses": { "201": { "description": "added" } } }
    },
    "/v1/coordinators/{account}/{user}": {
      "parameters": [ { "name": "account", "in": "path", "required": true, "schema": { "type": "string" } }, { "name": "user", "in": "path", "required": true, "schema": { "type": "string" } } ],
      "delete": { "summary": "Remove a coordinator.", "responses": { "204": { "description": "removed" } } }
    },
    "/v1/weights": {
      "get": { "summary": "GPU-type billing weights.", "responses": { "200": { "description": "Weights", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Weights" } } } } } },
      "patch": { "summary": "Set weights (admin).", "requestBody": { "content": { "application/json": { "schema": { "$ref": "#/components/schemas/WeightsPatch" } } } }, "responses": { "200": { "description": "the new weights" } } }
    },
    "/v1/policy": {
      "get": { "summary": "Site policy.", "responses": { "200": { "description": "Policy", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Policy" } } } } } },
      "patch": { "summary": "Change policy fields (admin); any subset of Policy.", "requestBody": { "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Policy" } } } }, "responses": { "200": { "description": "the new policy" } } }
    },
    "/v1/audit": { "get": { "summary": "Append-only audit log (admins, readers).", "parameters": [ { "name": "after", "in": "query", "schema": { "type": "integer" } }, { "name": "limit", "in": "query", "schema": { "type": "integer" } } ], "responses": { "200": { "description": "entries: id, at, actor, action, target, old, new" } } } },
    "/v1/usage": { "get": { "summary": "Usage by account (descendants included) or by user, over [since, at] (default: the window ending at at).",
      "parameters": [ { "name": "by", "in": "query", "schema": { "type": "string", "enum": ["account", "user"] } }, { "name": "since", "in": "query", "schema": { "type": "string" } }, { "name": "at", "in": "query", "schema": { "type": "string" } } ],
      "responses": { "200": { "description": "{from, to, by, rows: [{account, user, usage_gpu_hours, raw_gpu_hours, free_gpu_hours, in_tree}]}" } } } },
    "/v1/usage/import": { "post": { "summary": "Import sacct -X -D -P -o JobID,Account,User,Partition,AllocTRES,Start,End,State output (admin). Idempotent.",
      "parameters": [ { "name": "skip_invalid", "in": "query", "schema": { "type": "boolean" } }, { "name": "tz", "in": "query", "schema": { "type": "string" }, "description": "IANA zone of sacct times" } ],
      "requestBody": { "content": { "text/plain": { "schema": { "type": "string" } } } },
      "responses": { "200": { "description": "{lines, runs, inserted, updated, unchanged, skipped, invalid}" }, "422": { "description": "invalid lines (with line numbers); nothing imported" } } } },
    "/v1/share": { "get": { "summary": "The sshare-like fair-share table at ?at= (default now).", "parameters": [ { "name": "at", "in": "query", "schema": { "type": "string" } } ],
      "responses": { "200": { "description": "{at, window_secs, rows: [ShareRow]}" } } } },
    "/v1/backup": { "post": { "summary": "Write a consistent copy of the database (SQLite online backup API) to an absolute path on budgetd's host (admin). Body budget_protocol::service::BackupRequest {path, overwrite}; an existing file is refused (409) unless overwrite. Answers BackupReport: generation, last audit id and runs of the copy.", "responses": { "200": { "description": "BackupReport" }, "409": { "description": "the file exists" }, "422": { "description": "bad path, missing folder, write failure" } } } },
    "/v1/plugins": { "get": { "summary": "Which store generation each slurmctld plugin holds (from their snapshot requests' X-Budget-Plugin header) and applied_generation, the lowest among those seen within horizon_secs: every change up to it is in effect in slurmctld (any authenticated caller).", "responses": { "200": { "description": "PluginsState" } } } },
    "/v1/snapshot": { "get": { "summary": "budget_protocol::PluginSnapshot (admin). ETag = version; If-None-Match gives 304. A plugin names itself in X-Budget-Plugin: NAME period=SECS.", "responses": { "200": { "description": "PluginSnapshot" }, "304": { "description": "unchanged" } } } },
    "/v1/sync/jobs": { "post": { "summary": "Job-state sync from the plugin (admin); idempotent.", "requestBody": { "content": { "application/json": { "schema": { "$ref": "#/components/schemas/JobSync" } } } },
      "responses": { "200": { "description": "SyncOutcome", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/SyncOutcome" } } } } } } },
    "/v1/jobs/{id}/why": { "get": { "summary": "Explain a job: tier, rank path with ratios, fair-share factor, priority parts, protection, preemption peers.",
      "parameters": [ { "name": "id", "in": "path", "required": true, "schema": { "type": "integer" } } ], "responses": { "200": { "description": "Why" }, "404": { "description": "not in the ledger" } } } },
    "/v1/drains": {
      "get": { "summary": "Drained nodes with Slurm's state, the jobs holding each, when each job is requeued (now for free tier, else its window end) and when the node will be empty.", "responses": { "200": { "description": "list of drain status" } } },
      "post": { "summary": "Drain nodes (admin): {\"nodes\": \"gpu[1-2]\", \"reason\": \"text\"}. Sets Slurm DRAIN (reason \"budget: text\"); budgetd requeues each job as soon as its contract allows.", "responses": { "201": { "description": "status of the drained nodes" }, "403": { "description": "not an admin" }, "422": { "description": "bad hostlist, unknown node or bad reason; nothing changed" } } }
    },
    "/v1/drains/{nodes}": {
      "parameters": [ { "name": "nodes", "in": "path", "required": true, "schema": { "type": "string" } } ],
      "delete": { "summary": "Undrain nodes (admin): Slurm state=resume and the drain forgotten.", "responses": { "200": { "description": "undrained" }, "404": { "description": "not drained by budgetd" } } }
    },
    "/v1/preemptions": {
      "get": { "summary": "Preemption record since ?since= (admins, readers): victim run, preemptor, reason (free_tier, over_budget, rebalance, drain), GPU-hours of the lost run; totals per account.", "parameters": [ { "name": "since", "in": "query", "schema": { "type": "string" } } ], "responses": { "200": { "description": "rows and by_account" } } },
      "post": { "summary": "Record a preemption (admin; preempt/budget's thread). Idempotent by (victim, run).", "responses": { "200": { "description": "{inserted: bool}" } } }
    },
    "/v1/agent/report": { "post": { "summary": "A node agent's report (budget_protocol::AgentReport; unknown fields refused; at most body_limit_bytes). Admins (the agent as root on the socket) or role=agent tokens over TCP. Stores the node's latest report and the idle streaks per (job, GPU); repeating a report changes nothing.",
      "requestBody": { "content": { "application/json": { "schema": { "$ref": "#/components/schemas/AgentReport" } } } },
      "responses": { "200": { "description": "{node, latest_replaced, streaks_inserted, streaks_extended, streaks_unchanged, streaks_broken}" }, "403": { "description": "neither admin nor agent" }, "413": { "description": "body too large; nothing stored" }, "422": { "description": "unknown field, bad node/uuid, time from the future, duplicate GPU; nothing stored" } } } },
    "/v1/idle": { "get": { "summary": "Jobs idle beyond policy idle_threshold_secs in their nodes' latest (non-stale) reports, with account, user, nodes, idle GPUs and since when; idle GPU-hours per job account over [since, at] (default: the window ending at at); latest report per node (admins, readers). Coordinators see their subtrees' jobs, users their own and their accounts'.",
      "parameters": [ { "name": "since", "in": "query", "schema": { "type": "string" } }, { "name": "at", "in": "query", "schema": { "type": "string" } } ],
      "responses": { "200": { "description": "{at, from, threshold_secs, stale_after_secs, flagged: [{job_id, account, user, nodes, gpus_idle, gpus, idle_since, idle_secs, idle_gpus}], by_account: [{account, idle_gpu_hours, jobs, idle_gpus_now, flagged_jobs}], nodes: [{node, at, age_secs, nvml, gpus, stale}]}" } } } },
    "/metrics": { "get": { "summary": "Prometheus text metrics (admins, readers).", "responses": { "200": { "description": "text/plain; version=0.0.4" } } } }
  }
}"##;
