//go:build e2e && linux

package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/demo"
	"github.com/toolledger/toolledger/internal/testenv"
	"github.com/toolledger/toolledger/pkg/sdk"
)

// leaseGrace is every manager's --lease-grace: with the tools' 1s timeout,
// a claim whose executor died lapses 2s after it was written.
const leaseGrace = time.Second

// memberLeaseDuration is every manager's --member-lease-duration: a killed
// manager's share passes to the others 3s after its last renewal.
const memberLeaseDuration = 3 * time.Second

func allScenarios() []scenario {
	compensatable := toolOptions{class: v1alpha1.Compensatable, lookup: true}
	return []scenario{
		{"crash-1", "1 manager, SIGKILLed mid-dispatch and replaced", crashScenario(1, allStages)},
		{"crash-2", "2 managers at once (no leader election), one SIGKILLed mid-dispatch", crashScenario(2, victimStages)},
		{"crash-3", "3 managers at once (no leader election), one SIGKILLed mid-dispatch", crashScenario(3, victimStages)},
		{"share-kill", "3 managers sharing the actions by key, one holding claims SIGKILLed and not replaced until the others finish its share", shareKill},
		{"front-http-kill", "HTTP front: each intent POSTed twice at once with its Idempotency-Key, the only manager SIGKILLed mid-dispatch and replaced", frontKill(frontHTTP)},
		{"front-mcp-kill", "MCP front: each intent called twice at once with ACP's meta key (Go MCP SDK), the only manager SIGKILLed mid-dispatch and replaced", frontKill(frontMCP)},
		{"front-a2a-kill", "A2A front: each message sent twice at once by the A2A JavaScript SDK's client, the only manager SIGKILLed mid-dispatch and replaced", frontKill(frontA2A)},
		{"front-kind-flip", "fronts: each intent sent 3–5 times through the HTTP front, MCP (ACP's key) or A2A while the tenant's Tool is deleted and created again, so that a ClusterTool of the same name answers in turn", frontKindFlip},
		{"apiserver-restart", "kube-apiserver restarted mid-flight", restartScenario("kube-apiserver", (*cluster).restartAPIServer)},
		{"etcd-restart", "etcd restarted mid-flight (data kept)", restartScenario("etcd", (*cluster).restartEtcd)},
		{"drop-after-commit", "downstream: response dropped after commit", faultScenario(true, compensatable, func(rng *rand.Rand, n int) []demo.Fault {
			return []demo.Fault{{Mode: demo.FaultDropAfterCommit, Count: intRange(rng, 1, n)}}
		})},
		{"500-after-commit", "downstream: 500 after commit", faultScenario(true, compensatable, func(rng *rand.Rand, n int) []demo.Fault {
			return []demo.Fault{{Mode: demo.FaultErrorAfterCommit, Count: intRange(rng, 1, n)}}
		})},
		{"slow", "downstream: slower than the 1s tool timeout (held 1.1–3s)", faultScenario(true, compensatable, func(rng *rand.Rand, n int) []demo.Fault {
			faults := make([]demo.Fault, intRange(rng, 1, n))
			for i := range faults {
				faults[i] = demo.Fault{Mode: demo.FaultDelay, Delay: between(rng, 1100*time.Millisecond, 3*time.Second)}
			}
			return faults
		})},
		{"reset-before-commit", "downstream: connection reset before commit", faultScenario(true, compensatable, func(rng *rand.Rand, n int) []demo.Fault {
			return []demo.Fault{{Mode: demo.FaultDropBeforeCommit, Count: intRange(rng, 1, n)}}
		})},
		{"503-storm", "downstream: 503 storms (Retry-After 0–1s)", faultScenario(true, compensatable, func(rng *rand.Rand, n int) []demo.Fault {
			return []demo.Fault{{Mode: demo.FaultUnavailable, Count: intRange(rng, n, 5*n), RetryAfter: rng.IntN(2)}}
		})},
		{"lookup-down", "downstream: lookup endpoint down for a while (4s unknown-outcome deadline)",
			faultScenario(true, toolOptions{class: v1alpha1.Compensatable, lookup: true, deadline: 4 * time.Second}, func(rng *rand.Rand, n int) []demo.Fault {
				return []demo.Fault{
					{Mode: demo.FaultDropAfterCommit, Count: intRange(rng, 1, n)},
					{Mode: demo.FaultLookupUnavailable, Count: intRange(rng, 2*n, 12*n)},
				}
			})},
		{"keyprotected-resend", "KeyProtected re-sent under the same key (deduplicating downstream, no lookup)",
			faultScenario(false, toolOptions{class: v1alpha1.KeyProtected}, func(rng *rand.Rand, n int) []demo.Fault {
				hold := 1100 * time.Millisecond
				faults := make([]demo.Fault, intRange(rng, 1, n))
				for i := range faults {
					switch rng.IntN(3) {
					case 0:
						faults[i] = demo.Fault{Mode: demo.FaultDropAfterCommit}
					case 1:
						faults[i] = demo.Fault{Mode: demo.FaultErrorAfterCommit}
					default:
						faults[i] = demo.Fault{Mode: demo.FaultDelay, Delay: between(rng, hold, hold+900*time.Millisecond)}
					}
				}
				return faults
			})},
		{"held-past-budget", "KeyProtected with a lookup of committed charges: first requests held 10–13s downstream, past the whole retry budget (lookups 404, re-sends 409 in progress)",
			heldPastBudget(false)},
		{"held-past-budget-kill", "the same, a steady manager SIGKILLed while a request is held, and replaced", heldPastBudget(true)},
		{"duplicate-storm", "duplicate storm: 200 SDK callers over 20 intents + kubectl apply loop", duplicateStorm},
		{"changed-payload", "changed payload under an existing key, under load", changedPayload},
		{"delete-apply", "re-created after success: kubectl delete, then apply (NonRepeatable)", recreateScenario(tombstones, nil, deleteThenApply)},
		{"replace-force", "re-created after success: kubectl replace --force (NonRepeatable)", recreateScenario(tombstones, nil, replaceForce)},
		{"prune-resync", "re-created after success: kubectl apply --prune prunes, then re-syncs (NonRepeatable)", recreateScenario(tombstones, pruneArgs, pruneThenResync)},
		{"tickets-by-reference", "tickets with no idempotency key: lost answers found by the incident (Reference lookup), resets before commit escalated", ticketsByReference},
		{"approvals", "approvals: alice applies (kubectl --as), bob approves or denies (kubectl toolledger --as), some after a refused digest or self-approval; lost responses", approvals},
		{"stale-resolution", "two resolvers, one escalation: B resolves attempt 1 (kubectl toolledger resolve), A submits the same finding from a stale page of attempt 1 (NonRepeatable; lost requests, lost answers)", staleResolutions},
		{"job-ttl-lost-answer", "kubernetesApply: a Job removed by its TTL after the apply's answer was lost (Compensatable)", jobTTLLostAnswer},
		// The notification scenario and, last, the archive scenarios stop
		// the steady managers and run their own: with a sink, and keeping
		// keys on PostgreSQL instead of in Tombstones.
		{"notify-kill", "notifications: the only manager SIGKILLed while a sink held its CloudEvents unanswered, then replaced", notifyKill},
		{"archive-kill-retire", "archive: 1 manager SIGKILLed while it retires records (between the archive commit and the etcd delete), then every key applied again", archiveKillRetire},
		{"archive-kill-keycheck", "archive: archived keys applied again with fresh ones, the only manager SIGKILLed during their key check", archiveKillKeyCheck},
		{"archive-conflict-original", "archive: another request under an archived key through each front and as a manifest, then the original again: refused, then answered from the archive", archiveConflictThenOriginal},
		{"archive-postgres-restart", "archive: PostgreSQL stopped and restarted under load (2 managers)", archivePostgresRestart},
		{"archive-prune-resync", "archive: kubectl apply --prune prunes, then re-syncs (NonRepeatable, 2 managers)",
			recreateScenario(archiveKeeper(v1alpha1.TombstoneCauseDeleted), pruneArgs, pruneThenResync)},
		{"archive-rollback", "archive: the ledger run without its archive (a rollback), then a rolling pair where one manager lacks it: archived keys applied again with fresh ones",
			archiveRollback},
		{"archive-failover-sync", "archive: a synchronous standby promoted after the primary was SIGKILLed under load (2 managers): every retired key answered", archiveFailover(failoverSynchronous)},
		{"archive-failover-lagging", "archive: an asynchronous standby that stopped receiving the WAL promoted after the primary was SIGKILLed: the lost keys held until the loss is acknowledged (kubectl toolledger archive)", archiveFailover(failoverLagging)},
		{"archive-restored", "archive: the database restored from a base backup taken before a batch retired: the lost keys held until the loss is acknowledged", archiveFailover(restoredFromBackup)},
		{"archive-read-memory", "archive: 50 records of 1 MiB read by kubectl (paged and whole) and the console's History page, through the archive API", archiveReadMemory},
	}
}

// scenarioNotes explains, for results.md, what a trial is in each scenario.
const scenarioNotes = `
## What a trial is

Every scenario but the KeyProtected one and the Job one runs against the demo downstream in **naive mode**
(` + "`demo-downstream --naive`" + `): it commits every request it accepts, so any request the
controller sent twice for an applied intent would count as a second effect. Those tools are
` + "`Compensatable`" + ` with the downstream's lookup by key, so the controller settles every
ambiguous outcome by lookup and never re-sends blindly; the re-creation scenarios, which inject no
faults, use ` + "`NonRepeatable`" + ` tools. Tools time out after 1s, managers run with
` + "`--lease-grace=1s`" + `, ` + "`--member-lease-duration=3s`" + ` and no leader election.

* **1 manager SIGKILLed** — one trial is one tenant of 5–10 intents and one SIGKILL of
  the only manager, then a new manager. Each trial aims at a kill point (not yet claimed; claimed
  but the request not sent; request held downstream by a 1.5–3.5s delay; committed downstream but
  the outcome not recorded; a random moment): the suite freezes the manager (SIGSTOP) at random
  moments, reads the ledger and the downstream, and kills it (SIGKILL) when the aimed-at point is
  reached or after 3s. The notes count the points reached. Trials follow each other without waiting
  for the previous one to settle, so an intent may live through several kills.
* **2 or 3 managers** — as above with 2 (or 3) managers running at once: the suite freezes them
  all to look, kills one whose own claim stands at the aimed-at point (a random one at a random
  moment otherwise), thaws the others and starts a replacement.
* **HTTP, MCP and A2A fronts** — one row per front; one trial is one tenant with its own gateway process
  (` + "`toolledger-mcp --local-only`" + `) and 5–7 intents, each with a key its caller minted (the
  ` + "`Idempotency-Key`" + `; ACP's ` + "`arguments.meta.idempotency_key`" + ` through the Go MCP SDK's client;
  the messageId through the A2A JavaScript SDK's client) and each sent by two callers at once; the
  only manager is SIGKILLed at an aimed-at point as above and replaced, and every caller sends again,
  with its key, while the answer is in flight, until it is final. An answer naming another action
  than the key's, or another amount, is a violation the driver saw. At most 10 trials each.
* **a retry while the tool's kind flips** — a ClusterTool ` + "`charge`" + ` admits every tenant of the row, and each
  tenant's own Tool ` + "`charge`" + ` shadows it while it exists. One trial is one tenant (5 at a time, at most 10) with
  its own gateway, which serves ClusterTools: 3–6 intents, each through the HTTP front, MCP with ACP's key or A2A
  with its caller's key, each sent again 2–4 times, while the suite deletes the tenant's Tool and creates it
  again every 0.3–1s. Every client key must be one action (its name is the caller's, the tool name's and the
  key's), with one effect downstream: a retry is answered with the outcome, or refused as a conflict when the
  kind it meets is not the one recorded; an action another name would hold shows as a stray effect.
* **3 managers sharing the actions** — the managers split the active actions by key over their
  member Leases (as in every scenario; ` + "`--member-lease-duration=3s`" + `). One trial is one tenant of 8–12
  intents, every request held downstream 1.5–3.5s; the suite kills (SIGKILL, as above) a manager
  holding such a request and starts no replacement until the trial has settled, so the two others
  must take the victim's share when its Lease lapses, settle its claimed actions by lookup and
  finish those it owned but had not claimed. The notes count the actions the victim had written and
  left unfinished, each settled by another manager. It runs a fifth of the other scenarios' trials,
  as each waits for its trial to settle.
* **kube-apiserver / etcd restarted** — one restart per round of 10 trials (tenants of 3–6
  intents each): the intents are created at random moments over 1.5s, some held downstream by
  1–2.5s delays, and the process is stopped at a random moment 0.3–1.2s into the round, kept down
  0.5–2.5s and started again (same port, certificates and data). Each trial thus meets the restart
  at a different point of its dispatch; the number of restarts is trials/10. Neither process
  finishes its graceful shutdown while clients hold watches open, so each stop is a SIGTERM
  followed by a SIGKILL 2s later. How long the round took to settle after the API was back is
  latency, not correctness: actions whose writes failed during the outage wait out the
  controller's per-item exponential retry (capped at 1 minute) and client-go's re-list backoff.
* **approvals** — the tool requires approval, and the identity admission policies are installed.
  One trial is one tenant of 4–6 intents that alice (bound to the shipped agent role, and to the
  approver role so that only the separation of duties stops her) applies with
  ` + "`kubectl --as=alice apply`" + `; once they all await approval, bob (the approver role)
  decides each with ` + "`kubectl toolledger approve|deny --as=bob --digest …`" + `: approve (2 in 5),
  deny, or approve after a refused attempt (an approval of another intent's digest applied with
  ` + "`kubectl --as=bob apply`" + `, or ` + "`kubectl toolledger approve --as=alice`" + ` of her own
  intent), which must leave the intent waiting and unsent. Up to n−1 lost responses and n−1 lost
  requests are injected first, so approved intents are settled by lookup or retried under their
  key, without a new approval. Every approved intent must succeed with bob named in
  ` + "`status.approval`" + ` and alice in ` + "`toolledger.dev/requested-by`" + `; every denied one
  must fail with class Denied and no attempt. It runs a fifth of the other scenarios' trials, 3 at
  a time.
* **stale resolution** — one trial is one tenant (4 at a time) of 1–3 intents of a
  ` + "`NonRepeatable`" + ` tool, whose first request is lost before it applies and whose second applies
  and loses its answer: each escalates twice. At the first escalation two resolvers look the key up
  downstream and find the same; B records it with ` + "`kubectl toolledger resolve --attempt 1 --wait`" + `
  (` + "`RetrySafe`" + ` when nothing was charged, ` + "`Succeeded`" + ` with the charge otherwise). A, holding a page of
  attempt 1, submits the same finding as a ToolResolution manifest of attempt 1 (` + "`kubectl apply`" + `,
  which checks nothing) right away in half the trials, and in the others only once the action has
  moved on (attempt 2 sent and escalated), after ` + "`kubectl toolledger resolve --attempt 1`" + ` refused it
  first. A's finding must never be applied once the action moved on: attempt 2 may have applied,
  and a naive downstream charges every request it accepts, so a re-send would be a duplicate. Later
  escalations are resolved on what the downstream shows then. It runs 2 in 5 of the other
  scenarios' trials, 20 at least.
* **tickets by reference** — the downstream's ticket system takes no idempotency key at all: a
  re-sent request opens a second ticket. One trial is one tenant (8 at a time) of 5–10 intents of
  a ` + "`Compensatable`" + ` tool whose lookup is ` + "`strategy: Reference`" + `: a search
  ` + "`/tickets?correlation_id={correlation_id}`" + ` whose match must have the intent's incident and an id.
  Answers are lost after the ticket opened (dropped, 500, or slower than the 1s timeout), a few
  503s, and 0–1 requests reset before anything opened: the search then lists nothing, which proves
  nothing (` + "`noMatchMeansAbsent`" + ` off), so that intent escalates after the tool's 8s deadline
  instead of risking a second ticket. Tickets are counted by incident; every key must have at most
  one, and a Succeeded intent's reference must be its incident's ticket.
* **downstream faults** — one trial is one tenant of 5–10 intents, with the faults injected just
  before its intents; 8 trials run at a time against one downstream, so a fault may hit a
  neighbouring trial's request instead.
* **KeyProtected re-send** — a deduplicating downstream and a KeyProtected tool without lookup:
  ambiguous outcomes are re-sent under the same key, and the downstream answers the replay.
  Requests are held 1.1–2s.
* **held past the retry budget** — the sample payments Tool's shape: a ` + "`KeyProtected`" + ` tool whose lookup
  reads committed charges only, its 404 declared proof of absence (` + "`notFoundMeansAbsent`" + `), against a
  deduplicating downstream. One trial is one tenant (8 at a time) of 3–6 intents, 1–2 of whose first requests
  the downstream holds 10–13s, past the whole retry budget (8 attempts of a 1s timeout, 0.2–1s apart): the
  lookup answers 404 and every re-send under the key 409 in progress until the held request commits. No
  action may end ` + "`Failed`" + ` (the check refuses a Failed action whose history shows an unseen outcome, and one
  with an effect is a phantom): each held intent must be found by a lookup once its request commits. In the
  second row a steady manager is SIGKILLed as soon as one of the trial's requests is held, and replaced.
* **duplicate storm** — one trial is one tenant (3 at a time): 200 concurrent SDK callers over 20
  intents (10 each, released at once) while ` + "`kubectl apply -f`" + ` applies a manifest of 5 more
  intents 3 times; 0–3 responses are dropped after commit. Every caller of an intent must be told
  the same outcome, and exactly one of them that it created it.
* **changed payload** — one trial is one tenant (4 at a time) of 5–10 intents being dispatched (some held
  200–800ms downstream) while 2–4 changed requests per key (another amount or currency, a member
  omitted or added) are sent through the SDK and one changed manifest through ` + "`kubectl apply`" + `:
  every one must be refused, and the ledger and the charge must hold the original amount.
* **re-created after success** — one trial is one tenant (8 at a time) that applies a manifest of
  2 intents labelled ` + "`app.kubernetes.io/part-of=<tenant>`" + `; once both succeeded (one dispatch
  each), kubectl takes them away and creates them again: ` + "`kubectl delete -f`" + ` (which waits until
  the records are gone) then ` + "`kubectl apply -f`" + `; ` + "`kubectl replace --force -f`" + `; or three GitOps
  syncs with ` + "`kubectl apply --prune -l app.kubernetes.io/part-of=<tenant>`" + ` and
  ` + "`--prune-allowlist=toolledger.dev/v1alpha1/ToolAction`" + ` (kubectl 1.32 prunes no custom resource
  without it): the manifest, then one without the intents (a ConfigMap) so that kubectl prunes
  them, then, once they are gone, the manifest again. Every re-created action must be answered by
  the key's Tombstone, which must name the deleted action: ` + "`Succeeded`" + ` with reason
  ` + "`SettledByTombstone`" + ` (condition and history), the original external reference and 0 attempts;
  and the downstream must have received exactly one request per key.
* **a Job removed by its TTL after a lost answer** — no downstream: the effect is a Job that a
  ` + "`kubernetesApply`" + ` tool (` + "`Compensatable`" + `, 1s timeout, 3s ` + "`unknownOutcomeDeadline`" + `)
  server-side applies, as the tenant's ServiceAccount, from a template with
  ` + "`ttlSecondsAfterFinished: 0`" + `. The control plane runs no Job or TTL controller, so the suite
  plays the TTL controller: it deletes every Job (background propagation) 0–500ms after the API
  server created it. The scenario's two managers (the steady ones are stopped, so that no manager
  keeps its answers) reach the API server through a proxy in the suite (plain HTTP on 127.0.0.1,
  forwarding everything, Impersonate-* headers and watches included, as the e2e admin): the first
  apply of each intent reaches the API server, which creates the Job, and once the Job is deleted
  the proxy closes the manager's connection without the answer. One trial is one tenant (4 at a
  time, two in five of ` + "`E2E_TRIALS`" + `, at least 20) of 1–3 intents. The Job's absence proves
  nothing for the class, so every intent must escalate (` + "`OutcomeUnknown`" + `, after 1 attempt, the
  message saying the absence proves nothing) and never be applied again; carol, bound to the
  shipped ` + "`toolledger-resolver`" + ` role, then resolves each with
  ` + "`kubectl toolledger resolve KEY --attempt 1 --outcome Succeeded --external-ref jobs.batch/<ns>/<name> --wait`" + `,
  and it must end Succeeded naming its Job. Effects are the Jobs the API server created, counted by
  a watch of each trial's namespace opened before its intents (ADDED events per name), never by the
  manager; a key with more than one is a duplicate. The row's phases are those the intents settled
  in, before the resolution; the check after it adds only violations. Made to take absence as
  proof for every class, as it did before issue 33, the adapter applied every intent twice (39
  duplicates of 39 keys in 20 trials).
* **notifications, the manager SIGKILLed** — the steady managers are stopped; the only manager runs
  with ` + "`--notification-sink`" + ` pointing at a CloudEvents receiver in the suite (127.0.0.1) that holds
  every delivery unanswered. One trial is one tenant of 5–10 intents (a quarter of ` + "`E2E_TRIALS`" + `
  trials) invoked through the SDK; once 1–all of them settled, their events recorded with the
  transitions and none acknowledged, the manager is SIGKILLed, the held deliveries are dropped
  unacknowledged, and a replacement starts with the receiver answering again. Every event the
  trial's actions owe (one per outcome) must then arrive and be recorded as delivered within a
  minute, and no event that no action owes; repeats are counted.
* **the archive** — the last rows run managers with ` + "`--archive-dsn`" + ` (the steady managers, which keep
  keys in Tombstones, are stopped) on a database of their own in a PostgreSQL server the suite starts from
  Debian's binaries on 127.0.0.1; ` + "`--archive-record-retention=24h`" + `, so that the records of earlier scenarios
  stay where they are, while the trials' Tools set ` + "`recordRetention: 1s`" + ` where records must leave etcd. A
  trial's ledger is then etcd and the archive: a key's record is the one in etcd, else its newest archived
  row (the ToolAction the row keeps), and every key is checked as above. No tenant may hold a Tombstone.
  Each runs a quarter of ` + "`E2E_TRIALS`" + ` trials (12 by default).
  * **SIGKILLed while retiring** — one trial is one tenant of 5–10 intents applied with ` + "`kubectl apply`" + `; once
    they all succeeded (one attempt each), the suite freezes the only manager (SIGSTOP) at random moments,
    reads the trial's records in etcd and its rows in the archive, and SIGKILLs the manager as soon as a record
    is in both — archived, not yet deleted from etcd — (or none is left in etcd, or after 8s), then starts a
    replacement at once. The notes count what each kill caught. Every record must then leave etcd, and its
    key be guarded by exactly one archived row, its own (` + "`RecordRetention`" + `, the original outcome and reference);
    the same manifests applied again must each be answered ` + "`Succeeded`/`SettledByArchive`" + ` with the original
    reference and 0 attempts, and the downstream must have received one request per key.
  * **SIGKILLed during the key check** — one trial is one tenant whose 3–6 intents are applied, succeed and
    leave etcd for the archive; then a manifest of those keys again and 2–4 fresh ones, in random order, is
    applied while the suite freezes the only manager at random moments and SIGKILLs it as soon as one of the
    new actions exists and has not passed its key check (not settled, not claimed, no attempt), then starts
    a replacement. Archived keys must be answered from the archive (as above, one request in all); each fresh
    key must succeed with one downstream request.
  * **a changed request, then the original, on an archived key** — two managers; one trial is one tenant (4 at
    a time) with its own gateway: one intent through each front with its caller's key, and one manifest. Once
    each has succeeded and its record left etcd for the archive, the key is sent with another amount, which
    must be refused as a conflict and execute nothing, and then the original again, which must be answered with
    the original outcome (its external reference); the original manifest is applied again right after the
    changed one (and again while the changed one's refused record is still in etcd, which the notes count), and
    must be answered from the archive. One request downstream per key.
  * **PostgreSQL stopped under load** — two managers; one round of 6 trials per outage. Each trial invokes
    2–4 intents through the SDK at random moments over 1s; 0.3–1s in, PostgreSQL is stopped (a fast
    shutdown), and each trial invokes 2–4 more. For the 3–5s the server is down, none of those may reach the
    downstream, and each must be seen waiting, ` + "`Accepted`" + ` with the reason ` + "`ArchiveUnavailable`" + `; then the
    server is started again on its data, and each must be sent once.
  * **prune and re-sync** — the GitOps re-creation above, with two archive managers: every re-created action
    must be answered by the pruned action's archived row (` + "`Deleted`" + `), the only row guarding the key, and no
    Tombstone written.
  * **rollback** — each trial's keys succeed and leave etcd for the archive; the manager with the archive
    stops and one without it starts on the same ledger (its operator namespace), as after ` + "`helm rollback`" + `.
    It must log that it refuses to dispatch and fail its readiness check (` + "`[-]archive-binding`" + `); the archived
    keys applied again with 2–4 fresh ones must all wait, ` + "`Accepted`" + `, ` + "`ArchiveRequired`" + `, and reach no
    downstream. Then a manager with the archive joins it, as in the rollout that turns the archive on: the two
    split the keys, the one with the archive settles its share and the other keeps its own waiting; then the
    one without stops. Every archived key must be answered by its archived row with one downstream request
    in all, and every fresh key executed once.
  * **failovers and a restore** — each scenario starts servers of its own: a primary and a standby made
    with pg_basebackup that streams its WAL (for the restore, a primary alone), and two managers given a DSN
    of both hosts with ` + "`target_session_attrs=read-write`" + `, which reaches whichever serves as primary, each
    comparing the archive with the marks every second. A trial applies 3–6 intents with ` + "`kubectl apply`" + ` and
    waits until they succeed and leave etcd for the archive, four trials at a time. *Synchronous*: the
    primary names the standby in ` + "`synchronous_standby_names`" + `; once a third of the trials retired their
    records, the primary is SIGKILLed while the others apply theirs, and the standby promoted a second later;
    every trial's manifest applied again must be answered from the archive with one downstream request per
    key. *Lagging*: half the trials retire, the asynchronous standby stops receiving the WAL
    (` + "`primary_conninfo`" + ` cleared), the other half retire into the primary alone, the primary is SIGKILLed and
    the standby promoted. *Restored*: half the trials retire, a base backup is taken, the other half retire,
    and the database is restored from the backup in place. In both, the second half's keys applied again
    must all be held, ` + "`Accepted`" + ` with ` + "`ArchiveBehind`" + `, with no request downstream, both managers' readiness
    must fail (` + "`[-]archive-marks`" + `), and the first half's keys be answered from the archive; the held actions are
    deleted (the agents give up) and an operator with the shipped ` + "`toolledger-history-admin`" + ` role and
    ` + "`toolledger-archive-status`" + ` Role acknowledges the managers' finding with ` + "`kubectl toolledger archive acknowledge`" + `,
    which must name exactly each lost namespace's records (1 to the number its trial retired); the managers
    must then be ready, and two fresh intents of each of those namespaces succeed.
  * **reads of a large history** — no trials: one tenant's archive holds 50 records of a 1 MiB string
    parameter (and kubectl's last-applied copy of it), kept as the manager keeps a finished action; one
    manager serves the archive API, and the web console runs in its local mode. kubectl lists the records
    three times in pages and three times whole (` + "`--chunk-size=0`" + `) while the chain is verified, all at
    once, then the console's History page is opened three times at once: every list shows the 50 records, the
    peak resident memory of the manager and of the console grows by 64 MiB at most, and the manager still runs.
`

// --- shared pieces ---------------------------------------------------------------

// steadyManagers are two managers that run from the restart scenarios on.
func (s *suite) steadyManagers() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.steady {
		if s.steady[i] != nil && !s.steady[i].proc.exited() {
			continue
		}
		if s.steady[i] != nil {
			s.t.Logf("steady manager %s had exited (%v); starting another", s.steady[i].id, s.steady[i].proc.err)
		}
		s.managers++
		m, err := s.procs.startManager(s.cluster.kubeconfig, fmt.Sprintf("steady-%03d", s.managers))
		if err != nil {
			return err
		}
		if err := m.waitReady(s.ctx); err != nil {
			return err
		}
		s.steady[i] = m
	}
	return nil
}

// intents adds n intents named prefix-NN with random amounts to the trial.
func intents(tr *trial, rng *rand.Rand, prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = tr.add(fmt.Sprintf("%s-%02d", prefix, i), int64(intRange(rng, 100, 99999)))
	}
	return keys
}

// parallelTrials runs s.trials trials of fn, parallel at a time, each with
// its own randomness.
func (s *suite) parallelTrials(sc *run, parallel int, fn func(i int, rng *rand.Rand) error) error {
	return s.parallelTrialsOf(sc, s.trials, parallel, fn)
}

// parallelTrialsOf is parallelTrials for n trials.
func (s *suite) parallelTrialsOf(sc *run, n, parallel int, fn func(i int, rng *rand.Rand) error) error {
	sem := make(chan struct{}, parallel)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for i := range n {
		if s.ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := fn(i, s.rngFor(sc.name, i)); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("trial %d: %w", i, err))
				mu.Unlock()
			}
		})
		if (i+1)%10 == 0 {
			s.logf("%s: %d/%d trials started", sc.name, i+1, n)
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}

// kubectl runs kubectl as the admin user, in its own process group,
// bounded by ctx.
func (s *suite) kubectl(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "kubectl", append([]string{"--kubeconfig=" + s.cluster.kubeconfig}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// manifest writes ToolActions as a multi-document YAML file.
func (s *suite) manifest(name string, tr *trial, keys []string, amount func(key string) int64) (string, error) {
	var b strings.Builder
	for _, key := range keys {
		b.WriteString("---\n" + testenv.ChargeManifest(tr.ns, key, amount(key), "cus_e2e"))
	}
	return s.writeManifest(name, tr, b.String())
}

// writeManifest writes YAML documents to the trial's manifest file name.
func (s *suite) writeManifest(name string, tr *trial, docs string) (string, error) {
	dir := filepath.Join(s.dir, "manifests")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	path := filepath.Join(dir, tr.ns+"-"+name+".yaml")
	return path, os.WriteFile(path, []byte(docs), 0o600)
}

// tally counts named events of a scenario for its notes.
type tally struct {
	mu     sync.Mutex
	counts map[string]int
	order  []string
}

func (t *tally) add(name string, n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.counts == nil {
		t.counts = map[string]int{}
	}
	if _, ok := t.counts[name]; !ok {
		t.order = append(t.order, name)
	}
	t.counts[name] += n
}

func (t *tally) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	parts := make([]string, 0, len(t.order))
	for _, name := range t.order {
		parts = append(parts, fmt.Sprintf("%s %d", name, t.counts[name]))
	}
	return strings.Join(parts, ", ")
}

// --- the naive downstream's self-check --------------------------------------

// selfCheck proves on the real processes that the check is not vacuous: the
// naive downstream counts a request sent twice as two effects, and Check
// reports it, while the deduplicating one would have hidden it.
func (s *suite) selfCheck() error {
	for _, naive := range []bool{true, false} {
		d, err := s.procs.startDownstream(fmt.Sprintf("selfcheck-naive-%t", naive), naive)
		if err != nil {
			return err
		}
		key := "selfcheck/order-1"
		var statuses []int
		for range 2 {
			status, err := d.charge(s.ctx, key, 1000)
			if err != nil {
				return err
			}
			statuses = append(statuses, status)
		}
		st, err := d.stats(s.ctx)
		if err != nil {
			return err
		}
		_, c, err := d.lookup(s.ctx, key)
		if err != nil {
			return err
		}
		d.proc.stop(5 * time.Second)
		r := Check(Trial{
			Name: "selfcheck", Prefix: "selfcheck/", Keys: []string{key},
			Actions: map[string]Action{key: {Key: key, Phase: PhaseSucceeded, ExternalRef: c.ID}},
			Effects: st.Effects, Charges: map[string]Charge{key: c},
		})
		s.logf("self-check, naive=%t: the same request twice answered %v, %d effects; the check reports %d duplicates %v",
			naive, statuses, st.Effects[key], r.Duplicates, r.Violations)
		switch {
		case naive && (st.Effects[key] != 2 || r.Duplicates != 1):
			return fmt.Errorf("the naive downstream counted %d effects and the check %d duplicates; want 2 and 1", st.Effects[key], r.Duplicates)
		case !naive && (st.Effects[key] != 1 || !r.OK()):
			return fmt.Errorf("the deduplicating downstream counted %d effects; want 1", st.Effects[key])
		}
	}
	return nil
}

// --- downstream faults -------------------------------------------------------------

// faultParallel is how many trials of a downstream-fault scenario run at once.
const faultParallel = 8

// faultScenario runs trials of 5–10 intents, faultParallel trials at a
// time, each injecting its faults just before it invokes its intents.
func faultScenario(naive bool, opts toolOptions, faults func(rng *rand.Rand, n int) []demo.Fault) func(s *suite, sc *run) error {
	return func(s *suite, sc *run) error {
		return s.downstreamScenario(sc, naive, "effects", func(d *downstream, injected *tally) error {
			return s.parallelTrials(sc, faultParallel, func(_ int, rng *rand.Rand) error {
				tr, err := s.newTrial(sc, d, opts)
				if err != nil {
					return err
				}
				n := intRange(rng, 5, 10)
				keys := intents(tr, rng, "order", n)
				fs := faults(rng, n)
				for _, f := range fs {
					injected.add(string(f.Mode), max(f.Count, 1))
				}
				if err := d.inject(s.ctx, fs...); err != nil {
					return err
				}
				ctx, cancel := context.WithTimeout(s.ctx, 2*time.Minute)
				defer cancel()
				var wg sync.WaitGroup
				s.invokeAll(ctx, tr, keys, &wg)
				wg.Wait()
				return nil
			})
		})
	}
}

// downstreamScenario runs load against a downstream of its own, then
// verifies every trial and notes the faults injected, the downstream's
// requests for its effects, and the paths through the ledger.
func (s *suite) downstreamScenario(sc *run, naive bool, effects string, load func(d *downstream, injected *tally) error) error {
	if err := s.steadyManagers(); err != nil {
		return err
	}
	d, err := s.procs.startDownstream(sc.name, naive)
	if err != nil {
		return err
	}
	defer d.proc.stop(5 * time.Second)
	var injected tally
	err = load(d, &injected)
	verifyErr := s.verify(sc)
	st, statsErr := d.stats(s.ctx)
	if statsErr == nil {
		sc.row.Notes = append(sc.row.Notes, fmt.Sprintf("faults injected: %s; downstream requests %d for %d %s", injected.String(), st.TotalRequests, st.TotalEffects, effects))
	}
	sc.row.Notes = append(sc.row.Notes, s.paths(sc))
	return errors.Join(err, verifyErr, statsErr)
}

// paths summarises how the scenario's actions got to their end, by the
// reasons of their history.
func (s *suite) paths(sc *run) string {
	counts := map[string]int{}
	for _, tr := range sc.trials {
		all, err := s.records(s.ctx, tr)
		if err != nil {
			continue
		}
		for _, a := range all {
			steps := make([]string, 0, len(a.Status.History))
			for _, h := range a.Status.History {
				step := string(h.To)
				if h.Reason != step {
					step += "/" + h.Reason
				}
				steps = append(steps, step)
			}
			counts[strings.Join(steps, " > ")]++
		}
	}
	type path struct {
		name  string
		count int
	}
	var all []path
	for name, n := range counts {
		all = append(all, path{name, n})
	}
	slices.SortFunc(all, func(a, b path) int { return b.count - a.count })
	parts := make([]string, 0, 6)
	for i, p := range all {
		if i == 6 {
			parts = append(parts, fmt.Sprintf("%d other paths", len(all)-i))
			break
		}
		parts = append(parts, fmt.Sprintf("`%s` %d", p.name, p.count))
	}
	return "paths through the ledger (history: phase/reason): " + strings.Join(parts, ", ")
}

// --- SIGKILLed managers -----------------------------------------------------------------

// stage is where an action stood when its executor was killed.
type stage string

const (
	stageUnclaimed stage = "not yet claimed"
	stageNotSent   stage = "claimed, request not sent"
	stageInTransit stage = "claimed, request in transit"
	stageHeld      stage = "request held downstream"
	stageCommitted stage = "committed, outcome not recorded"
	stageAnswered  stage = "answered (not applied), outcome not recorded"
	stageRandom    stage = "a random moment"
)

var (
	allStages    = []stage{stageUnclaimed, stageNotSent, stageHeld, stageCommitted, stageRandom}
	victimStages = []stage{stageNotSent, stageHeld, stageCommitted, stageRandom}
)

// crashScenario runs managers at once and SIGKILLs one of them per trial at
// an aimed-at point of the trial's dispatch, then starts a replacement.
func crashScenario(managers int, targets []stage) func(s *suite, sc *run) error {
	return func(s *suite, sc *run) error {
		d, err := s.procs.startDownstream(sc.name, true)
		if err != nil {
			return err
		}
		defer d.proc.stop(5 * time.Second)
		var pool []*manager
		defer stopAll(&pool)
		var wg sync.WaitGroup
		// Agents wait through every later trial of the scenario.
		ctx, cancel := context.WithTimeout(s.ctx, time.Duration(s.trials)*5*time.Second+3*time.Minute)
		defer cancel()
		k, err := s.crashTrials(sc, d, &pool, managers, s.trials, targets, "crash"+strings.TrimPrefix(sc.name, "crash-"),
			func(tr *trial, rng *rand.Rand) (int, func(), error) {
				n := intRange(rng, 5, 10)
				keys := intents(tr, rng, "order", n)
				return n, func() { s.invokeAll(ctx, tr, keys, &wg) }, nil
			})
		if err != nil {
			return err
		}
		wg.Wait()
		err = s.verify(sc)
		sc.row.Notes = append(sc.row.Notes,
			fmt.Sprintf("%d SIGKILLs, %d manager processes started in all; kill points aimed at: %s", k.kills, k.started, k.aimed.String()),
			fmt.Sprintf("kill points reached: %s", k.reached.String()),
			fmt.Sprintf("actions of the trial caught at the kill, by point: %s", k.caught.String()),
			s.paths(sc))
		return err
	}
}

// crashLoad prepares a trial's intents, adding their keys to tr, and
// returns how many there are and the function that sends them.
type crashLoad func(tr *trial, rng *rand.Rand) (n int, send func(), err error)

// crashKills is what a scenario's SIGKILLs did.
type crashKills struct {
	kills, started         int
	aimed, reached, caught tally
}

// crashTrials runs trials trials with managers in *pool at once (named
// after prefix): each a tenant whose intents load prepares, the
// downstream's faults aimed at a kill point of targets, the intents sent,
// one manager SIGKILLed at that point and a replacement started. The pool
// is the caller's to stop once its agents are done.
func (s *suite) crashTrials(sc *run, d *downstream, pool *[]*manager, managers, trials int, targets []stage, prefix string, load crashLoad) (*crashKills, error) {
	k := &crashKills{}
	for i := range trials {
		if s.ctx.Err() != nil {
			break
		}
		rng := s.rngFor(sc.name, i)
		for len(*pool) < managers {
			m, err := s.startManager(prefix)
			if err != nil {
				return k, err
			}
			k.started++
			*pool = append(*pool, m)
		}
		tr, err := s.newTrial(sc, d, toolOptions{class: v1alpha1.Compensatable, lookup: true})
		if err != nil {
			return k, err
		}
		n, send, err := load(tr, rng)
		if err != nil {
			return k, err
		}
		target := targets[rng.IntN(len(targets))]
		if err := d.clearFaults(s.ctx); err != nil {
			return k, err
		}
		if err := d.inject(s.ctx, crashFaults(rng, target, n)...); err != nil {
			return k, err
		}
		send()
		report, err := s.killAt(*pool, tr, target, rng)
		if err != nil {
			return k, err
		}
		k.kills++
		k.aimed.add(string(target), 1)
		if report.hit {
			k.reached.add(string(target), 1)
		}
		for _, st := range []stage{stageUnclaimed, stageNotSent, stageInTransit, stageHeld, stageCommitted, stageAnswered} {
			if report.caught[st] > 0 {
				k.caught.add(string(st), report.caught[st])
			}
		}
		m, err := s.startManager(prefix)
		if err != nil {
			return k, err
		}
		k.started++
		(*pool)[report.victim] = m
		if (i+1)%10 == 0 {
			s.logf("%s: %d/%d trials; kill points reached: %s", sc.name, i+1, trials, k.reached.String())
		}
	}
	return k, nil //nolint:nilerr // a suite whose time is up stops here; verify says what is unsettled
}

// stopAll stops the managers of a scenario's pool, as it stands when the
// scenario ends.
func stopAll(pool *[]*manager) {
	for _, m := range *pool {
		m.proc.stop(10 * time.Second)
	}
}

// shareKill kills, in each trial, one of three managers while it holds
// claims on requests held downstream, and replaces it only once the
// trial's intents settled: the two others must take its share when its
// member Lease lapses, settle its claimed actions by lookup and finish the
// ones it owned and had not claimed. It runs a fifth of the trials of the
// other scenarios, as each waits for its trial to settle.
func shareKill(s *suite, sc *run) error {
	d, err := s.procs.startDownstream(sc.name, true)
	if err != nil {
		return err
	}
	defer d.proc.stop(5 * time.Second)
	var pool []*manager
	defer stopAll(&pool)
	var (
		wg             sync.WaitGroup
		byOthers, kept int
		handover       time.Duration
		kills          int
		cancels        []context.CancelFunc
	)
	defer func() {
		for _, cancel := range cancels {
			cancel()
		}
	}()
	for i := range max(s.trials/5, 1) {
		if s.ctx.Err() != nil {
			break
		}
		rng := s.rngFor(sc.name, i)
		for len(pool) < 3 {
			m, err := s.startManager("share")
			if err != nil {
				return err
			}
			pool = append(pool, m)
		}
		tr, err := s.newTrial(sc, d, toolOptions{class: v1alpha1.Compensatable, lookup: true})
		if err != nil {
			return err
		}
		n := intRange(rng, 8, 12)
		keys := intents(tr, rng, "order", n)
		if err := d.clearFaults(s.ctx); err != nil {
			return err
		}
		if err := d.inject(s.ctx, crashFaults(rng, stageHeld, n)...); err != nil {
			return err
		}
		// The agents wait for their own trial, which settles before the next.
		ctx, cancel := context.WithTimeout(s.ctx, 2*time.Minute)
		cancels = append(cancels, cancel)
		s.invokeAll(ctx, tr, keys, &wg)
		k, err := s.killAt(pool, tr, stageHeld, rng)
		if err != nil {
			return err
		}
		killed := time.Now()
		kills++
		victim := pool[k.victim].id
		if !k.hit {
			s.logf("%s: trial %d: no manager held a request downstream within 3s; killed %s at random", sc.name, i, victim)
		}
		s.waitSettled([]*trial{tr}, settleTimeout)
		handover = max(handover, time.Since(killed))
		var list v1alpha1.ToolActionList
		if err := s.cluster.client.List(s.ctx, &list, client.InNamespace(tr.ns)); err != nil {
			return err
		}
		for _, a := range list.Items {
			touchedByVictim := slices.ContainsFunc(a.Status.History, func(h v1alpha1.Transition) bool { return h.Executor == victim })
			last := a.Status.History[len(a.Status.History)-1].Executor
			switch {
			case !a.Status.Phase.IsSettled():
				tr.violation(a.Name, "not settled by the managers alive after %s was killed", victim)
			case !touchedByVictim:
				kept++
			case last == victim:
				// Finished before the kill.
			default:
				byOthers++
			}
		}
		m, err := s.startManager("share")
		if err != nil {
			return err
		}
		pool[k.victim] = m
		// Every manager lists the newcomer's Lease before the next trial.
		if err := testenv.Sleep(s.ctx, memberLeaseDuration/3+500*time.Millisecond); err != nil {
			return err
		}
	}
	wg.Wait()
	err = s.verify(sc)
	if kills > 0 && byOthers == 0 {
		err = errors.Join(err, fmt.Errorf("none of %d killed managers left an action for the others: the scenario showed no handover", kills))
	}
	sc.row.Notes = append(sc.row.Notes,
		fmt.Sprintf("%d SIGKILLs of a manager holding claims; %d actions it had written and left unfinished, every one settled by the two others (the longest wait from a kill to its trial settled: %s); %d actions of the trials the victim never wrote",
			kills, byOthers, handover.Round(100*time.Millisecond), kept),
		s.paths(sc))
	return err
}

// crashFaults shapes the downstream so that the aimed-at point lasts long
// enough to be caught.
func crashFaults(rng *rand.Rand, target stage, n int) []demo.Fault {
	switch target {
	case stageNotSent:
		// Many attempts, each with a window between claim and send.
		return []demo.Fault{{Mode: demo.FaultUnavailable, Count: intRange(rng, n, 2*n)}}
	case stageHeld:
		faults := make([]demo.Fault, intRange(rng, (n+1)/2, n))
		for i := range faults {
			faults[i] = demo.Fault{Mode: demo.FaultDelay, Delay: between(rng, 1500*time.Millisecond, 3500*time.Millisecond)}
		}
		return faults
	case stageCommitted:
		// Commits spread over time, each a window before its record.
		faults := make([]demo.Fault, n)
		for i := range faults {
			faults[i] = demo.Fault{Mode: demo.FaultDelay, Delay: between(rng, 50*time.Millisecond, 400*time.Millisecond)}
		}
		return faults
	case stageRandom:
		return crashFaults(rng, []stage{stageUnclaimed, stageNotSent, stageHeld, stageCommitted}[rng.IntN(4)], n)
	}
	return nil
}

type killReport struct {
	victim int
	hit    bool
	probes int
	caught map[stage]int
}

// killAt freezes every manager of the pool (SIGSTOP) at random moments,
// reads the ledger and the downstream while nothing but the downstream can
// move, and SIGKILLs a manager with an action of the trial standing at
// target — or, after 3s or 200 probes, a random one; the others are thawed.
// For stageRandom it kills a random manager at a random moment in the first
// 1.5s. The report counts the victim's actions (and the unclaimed ones) by
// the point they stood at.
func (s *suite) killAt(pool []*manager, tr *trial, target stage, rng *rand.Rand) (killReport, error) {
	var report killReport
	signalAll := func(sig syscall.Signal, except *manager) error {
		var errs []error
		for _, m := range pool {
			if m != except {
				if err := m.proc.signal(sig); err != nil {
					errs = append(errs, fmt.Errorf("cannot signal %s: %w\n%s", m.id, err, m.proc.tail(3000)))
				}
			}
		}
		return errors.Join(errs...)
	}
	began := time.Now()
	randomAt := between(rng, 0, 1500*time.Millisecond)
	for {
		report.probes++
		last := report.probes >= 200 || time.Since(began) > 3*time.Second
		if target == stageRandom {
			if err := testenv.Sleep(s.ctx, time.Until(began.Add(randomAt))); err != nil {
				return report, err
			}
			last = true
		}
		if err := signalAll(syscall.SIGSTOP, nil); err != nil {
			return report, err
		}
		// Let writes the managers already sent reach the API server.
		if err := testenv.Sleep(s.ctx, 5*time.Millisecond); err != nil {
			return report, err
		}
		byExecutor, err := s.snapshot(tr)
		if err != nil {
			_ = signalAll(syscall.SIGCONT, nil)
			return report, err
		}
		var candidates []int
		for i, m := range pool {
			switch {
			case target == stageUnclaimed && byExecutor[""][target] > 0:
				// Nobody has claimed them: any manager may die now.
				candidates = append(candidates, i)
			case target != stageRandom && byExecutor[m.id][target] > 0:
				candidates = append(candidates, i)
			}
		}
		if len(candidates) > 0 || last {
			report.hit = len(candidates) > 0 || target == stageRandom
			report.victim = rng.IntN(len(pool))
			if len(candidates) > 0 {
				report.victim = candidates[rng.IntN(len(candidates))]
			}
			victim := pool[report.victim]
			victim.proc.kill()
			if err := signalAll(syscall.SIGCONT, victim); err != nil {
				return report, err
			}
			report.caught = byExecutor[victim.id]
			if report.caught == nil {
				report.caught = map[stage]int{}
			}
			report.caught[stageUnclaimed] = byExecutor[""][stageUnclaimed]
			// A request the victim had written may still arrive: then it was
			// in transit rather than never sent.
			if notSent := report.caught[stageNotSent]; notSent > 0 {
				_ = testenv.Sleep(s.ctx, 50*time.Millisecond)
				if again, err := s.snapshot(tr); err == nil && again[victim.id][stageNotSent] < notSent {
					report.caught[stageInTransit] += notSent - again[victim.id][stageNotSent]
					report.caught[stageNotSent] = again[victim.id][stageNotSent]
					if target == stageNotSent && report.caught[stageNotSent] == 0 {
						report.hit = false
					}
				}
			}
			return report, nil
		}
		if err := signalAll(syscall.SIGCONT, nil); err != nil {
			return report, err
		}
		if err := testenv.Sleep(s.ctx, between(rng, time.Millisecond, 12*time.Millisecond)); err != nil {
			return report, err
		}
	}
}

// snapshot classifies the trial's unsettled actions, by claiming executor
// ("" for those not claimed), by where their dispatch stands; the managers
// are frozen meanwhile.
func (s *suite) snapshot(tr *trial) (map[string]map[stage]int, error) {
	var list v1alpha1.ToolActionList
	if err := s.cluster.client.List(s.ctx, &list, client.InNamespace(tr.ns)); err != nil {
		return nil, err
	}
	st, err := tr.d.stats(s.ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]map[stage]int{}
	count := func(executor string, at stage) {
		if out[executor] == nil {
			out[executor] = map[stage]int{}
		}
		out[executor][at]++
	}
	for _, a := range list.Items {
		key := a.Namespace + "/" + a.Name
		claim := a.Status.Claim
		switch {
		case claim == nil && !a.Status.Phase.IsSettled():
			count("", stageUnclaimed)
		case a.Status.Phase != v1alpha1.PhaseExecuting || claim == nil:
		case st.Requests[key] < int(a.Status.Attempts):
			count(claim.Executor, stageNotSent)
		default:
			status, _, err := tr.d.lookup(s.ctx, key)
			switch {
			case err != nil:
				return nil, err
			case status == http.StatusConflict:
				count(claim.Executor, stageHeld)
			case st.Effects[key] > 0:
				count(claim.Executor, stageCommitted)
			default:
				count(claim.Executor, stageAnswered)
			}
		}
	}
	return out, nil
}

// --- control-plane restarts -------------------------------------------------------

// restartScenario restarts a control-plane process once per round of 10
// trials, with the round's intents in flight.
func restartScenario(what string, restartFn func(*cluster, context.Context, time.Duration) (restart, error)) func(s *suite, sc *run) error {
	const perRound = 10
	return func(s *suite, sc *run) error {
		if err := s.steadyManagers(); err != nil {
			return err
		}
		d, err := s.procs.startDownstream(sc.name, true)
		if err != nil {
			return err
		}
		defer d.proc.stop(5 * time.Second)
		var (
			outages, recoveries []time.Duration
			killed              int
		)
		rounds := (s.trials + perRound - 1) / perRound
		for round := range rounds {
			if s.ctx.Err() != nil {
				break
			}
			rng := s.rngFor(sc.name, 1000+round)
			size := min(perRound, s.trials-round*perRound)
			var trials []*trial
			for range size {
				tr, err := s.newTrial(sc, d, toolOptions{class: v1alpha1.Compensatable, lookup: true})
				if err != nil {
					return err
				}
				trials = append(trials, tr)
			}
			faults := make([]demo.Fault, intRange(rng, 3, 10))
			for i := range faults {
				faults[i] = demo.Fault{Mode: demo.FaultDelay, Delay: between(rng, time.Second, 2500*time.Millisecond)}
			}
			if err := d.inject(s.ctx, faults...); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(s.ctx, 3*time.Minute)
			var wg sync.WaitGroup
			for _, tr := range trials {
				keys := intents(tr, rng, "order", intRange(rng, 3, 6))
				startAt := between(rng, 0, 1500*time.Millisecond)
				wg.Go(func() {
					if testenv.Sleep(ctx, startAt) != nil {
						return
					}
					var inner sync.WaitGroup
					s.invokeAll(ctx, tr, keys, &inner)
					inner.Wait()
				})
			}
			if err := testenv.Sleep(s.ctx, between(rng, 300*time.Millisecond, 1200*time.Millisecond)); err != nil {
				cancel()
				return err
			}
			st, _ := d.stats(s.ctx)
			r, err := restartFn(s.cluster, s.ctx, between(rng, 500*time.Millisecond, 2500*time.Millisecond))
			if err != nil {
				cancel()
				return err
			}
			outages = append(outages, r.unavailable)
			if r.killed {
				killed++
			}
			back := time.Now()
			wg.Wait()
			cancel()
			recovery := time.Since(back)
			recoveries = append(recoveries, recovery)
			s.logf("%s: round %d/%d: %s restarted (SIGKILLed after %s: %t) with %d downstream requests made so far, unavailable for %s; every intent settled %s later; the last to settle:%s",
				sc.name, round+1, rounds, what, stopGrace, r.killed, st.TotalRequests, r.unavailable.Round(100*time.Millisecond), recovery.Round(100*time.Millisecond), s.lastSettled(trials))
		}
		err = s.verify(sc)
		slices.Sort(outages)
		if len(outages) > 0 {
			slices.Sort(recoveries)
			sc.row.Notes = append(sc.row.Notes, fmt.Sprintf("%d %s restarts (one per round of %d trials), unavailable %s–%s (median %s) each; "+
				"%d of them SIGKILLed because they had not exited %s after SIGTERM; every intent of the round settled %s–%s (median %s) after the API was back",
				len(outages), what, perRound, outages[0].Round(100*time.Millisecond), outages[len(outages)-1].Round(100*time.Millisecond),
				outages[len(outages)/2].Round(100*time.Millisecond), killed, stopGrace,
				recoveries[0].Round(100*time.Millisecond), recoveries[len(recoveries)-1].Round(100*time.Millisecond), recoveries[len(recoveries)/2].Round(100*time.Millisecond)))
		}
		sc.row.Notes = append(sc.row.Notes, s.paths(sc))
		return err
	}
}

// lastSettled describes the trials' action that completed last.
func (s *suite) lastSettled(trials []*trial) string {
	var last *v1alpha1.ToolAction
	for _, tr := range trials {
		var list v1alpha1.ToolActionList
		if err := s.cluster.client.List(s.ctx, &list, client.InNamespace(tr.ns)); err != nil {
			continue
		}
		for i := range list.Items {
			a := &list.Items[i]
			if a.Status.CompletionTime != nil && (last == nil || a.Status.CompletionTime.After(last.Status.CompletionTime.Time)) {
				last = a
			}
		}
	}
	if last == nil {
		return " none"
	}
	return s.history(last.Namespace + "/" + last.Name)
}

// --- duplicate storm ------------------------------------------------------------------

func duplicateStorm(s *suite, sc *run) error {
	const intentsPerTrial, callersPerIntent, gitopsIntents, applies = 20, 10, 5, 3
	if err := s.steadyManagers(); err != nil {
		return err
	}
	d, err := s.procs.startDownstream(sc.name, true)
	if err != nil {
		return err
	}
	defer d.proc.stop(5 * time.Second)
	var counts tally
	err = s.parallelTrials(sc, 3, func(_ int, rng *rand.Rand) error {
		tr, err := s.newTrial(sc, d, toolOptions{class: v1alpha1.Compensatable, lookup: true})
		if err != nil {
			return err
		}
		keys := intents(tr, rng, "intent", intentsPerTrial)
		gitops := intents(tr, rng, "gitops", gitopsIntents)
		path, err := s.manifest("gitops", tr, gitops, tr.amount)
		if err != nil {
			return err
		}
		if drops := rng.IntN(4); drops > 0 {
			if err := d.inject(s.ctx, demo.Fault{Mode: demo.FaultDropAfterCommit, Count: drops}); err != nil {
				return err
			}
			counts.add("responses dropped after commit", drops)
		}
		ctx, cancel := context.WithTimeout(s.ctx, 2*time.Minute)
		defer cancel()
		type answer struct {
			out   *sdk.Outcome
			again int
			err   error
		}
		answers := make([][]answer, intentsPerTrial)
		for i := range answers {
			answers[i] = make([]answer, callersPerIntent)
		}
		release := make(chan struct{})
		var wg sync.WaitGroup
		for i := range intentsPerTrial * callersPerIntent {
			intent, caller := i%intentsPerTrial, i/intentsPerTrial
			wg.Go(func() {
				<-release
				req := tr.request(keys[intent], tr.amount(keys[intent]))
				out, again, err := s.invokeCounting(ctx, req)
				answers[intent][caller] = answer{out, again, err}
			})
		}
		wg.Go(func() {
			<-release
			for range applies {
				out, err := s.kubectl(ctx, "apply", "-f", path)
				if err != nil {
					tr.violation("gitops", "kubectl apply failed: %v: %s", err, out)
					return
				}
				counts.add("kubectl applies", 1)
				counts.add("ToolActions created by kubectl", strings.Count(out, " created"))
				counts.add("found unchanged by kubectl", strings.Count(out, " unchanged"))
				if testenv.Sleep(ctx, between(rng, 50*time.Millisecond, 300*time.Millisecond)) != nil {
					return
				}
			}
		})
		close(release)
		wg.Wait()
		for i, key := range keys {
			creators, retried := 0, false
			for _, a := range answers[i] {
				if a.err != nil {
					tr.violation(key, "a caller got no outcome: %v", a.err)
					continue
				}
				if !a.out.Deduplicated {
					creators++
				}
				// A caller that called again after an error may have lost
				// the answer that it created the action.
				retried = retried || a.again > 0
				first := answers[i][0].out
				if first != nil && (a.out.Phase != first.Phase || a.out.ExternalRef != first.ExternalRef) {
					tr.violation(key, "callers were told different outcomes: %s %q and %s %q", first.Phase, first.ExternalRef, a.out.Phase, a.out.ExternalRef)
				}
			}
			counts.add("SDK calls", callersPerIntent)
			if creators > 1 || creators == 0 && !retried {
				tr.violation(key, "%d of %d callers were told they created the action, want 1", creators, callersPerIntent)
			}
		}
		return nil
	})
	verifyErr := s.verify(sc)
	sc.row.Notes = append(sc.row.Notes, counts.String(), s.paths(sc))
	return errors.Join(err, verifyErr)
}

// --- changed payload --------------------------------------------------------------------

func changedPayload(s *suite, sc *run) error {
	if err := s.steadyManagers(); err != nil {
		return err
	}
	d, err := s.procs.startDownstream(sc.name, true)
	if err != nil {
		return err
	}
	defer d.proc.stop(5 * time.Second)
	var counts tally
	err = s.parallelTrials(sc, 4, func(_ int, rng *rand.Rand) error {
		tr, err := s.newTrial(sc, d, toolOptions{class: v1alpha1.Compensatable, lookup: true})
		if err != nil {
			return err
		}
		n := intRange(rng, 5, 10)
		keys := intents(tr, rng, "order", n)
		faults := make([]demo.Fault, intRange(rng, 1, n))
		for i := range faults {
			faults[i] = demo.Fault{Mode: demo.FaultDelay, Delay: between(rng, 200*time.Millisecond, 800*time.Millisecond)}
		}
		if err := d.inject(s.ctx, faults...); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(s.ctx, 2*time.Minute)
		defer cancel()
		var originals sync.WaitGroup
		s.invokeAll(ctx, tr, keys, &originals)
		if err := s.waitRecorded(ctx, tr, len(keys)); err != nil {
			return err
		}
		var changes sync.WaitGroup
		for _, key := range keys {
			for c := range intRange(rng, 2, 4) {
				req := tr.request(key, tr.amount(key))
				variant := (c + rng.IntN(4)) % 4
				switch variant {
				case 0:
					req.Parameters["amount"] = tr.amount(key) + int64(intRange(rng, 1, 1000))
				case 1:
					req.Parameters["currency"] = "USD"
				case 2:
					delete(req.Parameters, "customer")
				default:
					req.Parameters["memo"] = "changed"
				}
				changes.Go(func() {
					out, err := s.invoke(ctx, req)
					var conflict *sdk.DuplicateConflictError
					switch {
					case errors.As(err, &conflict):
						counts.add("changed SDK requests refused", 1)
					case err == nil:
						tr.violation(key, "a changed request (variant %d) was accepted: %s", variant, out.Phase)
					default:
						tr.violation(key, "a changed request (variant %d) failed otherwise: %v", variant, err)
					}
				})
			}
		}
		key := keys[rng.IntN(len(keys))]
		path, err := s.manifest("changed", tr, []string{key}, func(key string) int64 { return tr.amount(key) + 1 })
		if err != nil {
			return err
		}
		out, err := s.kubectl(ctx, "apply", "-f", path)
		if err == nil || !strings.Contains(out, "spec is immutable") {
			tr.violation(key, "kubectl apply of a changed manifest was not refused as immutable: %v: %s", err, out)
		} else {
			counts.add("changed kubectl applies refused", 1)
		}
		changes.Wait()
		originals.Wait()
		return nil
	})
	verifyErr := s.verify(sc)
	sc.row.Notes = append(sc.row.Notes, counts.String(), s.paths(sc))
	return errors.Join(err, verifyErr)
}

// waitRecorded waits until the trial's n actions exist.
func (s *suite) waitRecorded(ctx context.Context, tr *trial, n int) error {
	for {
		var list v1alpha1.ToolActionList
		if err := s.cluster.client.List(ctx, &list, client.InNamespace(tr.ns)); err == nil && len(list.Items) >= n {
			return nil
		}
		if err := testenv.Sleep(ctx, 20*time.Millisecond); err != nil {
			return fmt.Errorf("the %d intents of %s were not recorded: %w", n, tr.ns, err)
		}
	}
}
