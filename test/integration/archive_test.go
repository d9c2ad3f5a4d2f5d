package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/cmd/manager/app"
	"github.com/toolledger/toolledger/internal/archive"
	"github.com/toolledger/toolledger/internal/chainstate"
	"github.com/toolledger/toolledger/internal/mcpgateway"
	"github.com/toolledger/toolledger/internal/testenv"
	"github.com/toolledger/toolledger/internal/testenv/specenv"
	"github.com/toolledger/toolledger/pkg/sdk"
)

// With an archive, a finished record leaves etcd for a row in PostgreSQL,
// and its key is answered from there. The retentions pass on an injected
// clock; the PostgreSQL server is real, started for the spec.
var _ = Describe("The archive", func() {
	var (
		ctx               context.Context
		ns                string
		operatorNamespace string
		clock             *clocktesting.FakeClock
		server            *testenv.Postgres
		dsn               string
	)

	BeforeEach(func() {
		ctx = context.Background()
		ns = env.NewTenant()
		var err error
		server, err = testenv.StartPostgres(ctx, "")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(server.Stop)
		dsn = server.DSN
		clock = clocktesting.NewFakeClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
		operatorNamespace = env.NewOperatorNamespace()
		stop, err := testenv.StartManager(testenv.AsManager(env.Config), app.Options{ExecutorID: "archive", LeaseGrace: time.Second,
			Clock: clock, RetentionSweep: 200 * time.Millisecond, ArchiveDSN: dsn, ArchiveRecordRetention: 10 * time.Minute,
			Namespace: operatorNamespace, ArchiveBindingSettle: time.Millisecond})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { _ = stop() })
		env.CreateTool(ns, "charge", testenv.WithClass(v1alpha1.NonRepeatable), testenv.WithResultPointers("/status", "/amount", "/currency"),
			testenv.WithRecordRetention(time.Hour), testenv.WithKeyRetention(24*time.Hour))
	})

	charge := func(name string, amount int64) *v1alpha1.ToolAction { return chargeAction(ns, name, amount) }
	// psql reads the archive as an auditor would: rows of |-separated
	// columns.
	psql := func(sql string) []string {
		GinkgoHelper()
		bin, err := testenv.PostgresBinDir()
		Expect(err).NotTo(HaveOccurred())
		out, err := exec.CommandContext(ctx, filepath.Join(bin, "psql"), "-X", "-A", "-t", "-d", dsn, "-c", sql).CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), "psql: %s", out)
		return strings.Fields(strings.TrimSpace(string(out)))
	}

	It("keeps a retired record and answers its key from PostgreSQL, without a request downstream or a Tombstone", func() {
		key := ns + "/order-1001-charge"
		Expect(k8s.Create(ctx, charge("order-1001-charge", 1200))).To(Succeed())
		first := env.WaitForPhase(ns, "order-1001-charge", v1alpha1.PhaseSucceeded)
		Expect(downstream.Requests(key)).To(Equal(1))

		By("recordRetention passes: the record leaves etcd for a row in the archive, and no Tombstone is written")
		clock.Step(90 * time.Minute)
		Eventually(gone(first.DeepCopy())).Should(BeTrue())
		Expect(apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "order-1001-charge"}, &v1alpha1.Tombstone{}))).To(BeTrue())
		Expect(psql(fmt.Sprintf(`SELECT uid, phase, external_ref, request_digest, attempts, guards_key, cause, action->'spec'->'parameters'->>'amount'
			FROM toolledger_records WHERE namespace = '%s' AND key = 'order-1001-charge'`, ns))).To(Equal([]string{
			fmt.Sprintf("%s|Succeeded|%s|%s|1|t|RecordRetention|1200", first.UID, first.Status.ExternalRef, first.Status.RequestDigest)}))

		By("the same manifest applied again: the original outcome from the archive, no request")
		Expect(k8s.Create(ctx, charge("order-1001-charge", 1200))).To(Succeed())
		again := env.WaitForPhase(ns, "order-1001-charge", v1alpha1.PhaseSucceeded)
		Expect(again.Status.ExternalRef).To(Equal(first.Status.ExternalRef))
		Expect(first.Status.Result).NotTo(BeNil())
		Expect(again.Status.Result.Raw).To(MatchJSON(first.Status.Result.Raw), "the archived record's stored result: a replay's body is the original's")
		Expect(again.Status.Attempts).To(BeZero())
		Expect(specenv.Reasons(again)).To(ContainElement(v1alpha1.ReasonSettledByArchive))
		Expect(meta.FindStatusCondition(again.Status.Conditions, v1alpha1.ConditionSucceeded).Message).To(
			ContainSubstring(fmt.Sprintf("the archived record of order-1001-charge (UID %s)", first.UID)))
		Expect(downstream.Requests(key)).To(Equal(1))

		By("the SDK reports the answer as deduplicated")
		recreate(again)
		invoker, err := sdk.NewClient(env.Config)
		Expect(err).NotTo(HaveOccurred())
		outcome, err := invoker.Invoke(ctx, sdk.Request{Namespace: ns, Key: "order-1001-charge", Tool: "charge",
			Parameters: map[string]any{"amount": 1200, "currency": "EUR", "customer": "cus_1"}})
		Expect(err).NotTo(HaveOccurred())
		Expect(outcome.Deduplicated).To(BeTrue())
		Expect(outcome.ExternalRef).To(Equal(first.Status.ExternalRef))
		Expect(downstream.Requests(key)).To(Equal(1))

		By("different parameters under the key: DuplicateConflict, never sent, and the refused record leaves etcd at once")
		recreate(env.Get(ns, "order-1001-charge"))
		conflict := refusedThenGone(charge("order-1001-charge", 9900))
		Expect(conflict.Status.Error.Class).To(Equal(v1alpha1.ErrorClassDuplicateConflict))
		Expect(conflict.Status.Error.Reason).To(Equal(v1alpha1.ReasonArchiveConflict))
		Expect(conflict.Status.Error.Message).To(ContainSubstring(first.Status.RequestDigest))
		Expect(conflict.Status.Attempts).To(BeZero())
		Expect(downstream.Requests(key)).To(Equal(1))
		_, err = invoker.Invoke(ctx, sdk.Request{Namespace: ns, Key: "order-1001-charge", Tool: "charge",
			Parameters: map[string]any{"amount": 9900, "currency": "EUR", "customer": "cus_1"}})
		Expect(errors.Is(err, sdk.ErrDuplicateConflict)).To(BeTrue(), "Invoke: %v", err)
		Expect(downstream.Requests(key)).To(Equal(1))

		By("the original request right after the refused one, through the SDK and as a manifest: the original outcome from the archive")
		originalAfterRefused(invoker, ns, "order-1001-charge", 1200, 9900, first.Status.ExternalRef)
		Expect(downstream.Requests(key)).To(Equal(1))
		Expect(psql(fmt.Sprintf(`SELECT count(*) FROM toolledger_records WHERE namespace = '%s' AND key = 'order-1001-charge' AND phase = 'Failed'`, ns))).
			To(Equal([]string{"0"}), "a refused record, answered by the archived key, is not archived again")

		By("keyRetention passes: the key executes as a new intent, and the archive keeps both records")
		clock.Step(24 * time.Hour)
		Eventually(gone(env.Get(ns, "order-1001-charge"))).Should(BeTrue())
		Expect(k8s.Create(ctx, charge("order-1001-charge", 1200))).To(Succeed())
		fresh := env.WaitForPhase(ns, "order-1001-charge", v1alpha1.PhaseSucceeded)
		Expect(fresh.Status.Attempts).To(Equal(int32(1)))
		Expect(downstream.Requests(key)).To(Equal(2))
		Expect(psql(fmt.Sprintf(`SELECT count(*) FROM toolledger_records WHERE namespace = '%s' AND key = 'order-1001-charge' AND guards_key`, ns))).
			To(Equal([]string{"1"}))
	})

	It("keeps an archived key until the keptUntil its answers stated, though the tool's keyRetention is shortened after", func() {
		key := ns + "/order-5001-charge"
		Expect(k8s.Create(ctx, charge("order-5001-charge", 800))).To(Succeed())
		first := env.WaitForPhase(ns, "order-5001-charge", v1alpha1.PhaseSucceeded)
		promised := first.Status.KeptUntil
		Expect(promised).NotTo(BeNil())
		clock.Step(90 * time.Minute)
		Eventually(gone(first.DeepCopy())).Should(BeTrue())

		By("keyRetention shortened to 1h after the record was archived: the archive still answers the key")
		var tool v1alpha1.Tool
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "charge"}, &tool)).To(Succeed())
		tool.Spec.KeyRetention = &metav1.Duration{Duration: time.Hour}
		Expect(k8s.Update(ctx, &tool)).To(Succeed())
		Expect(k8s.Create(ctx, charge("order-5001-charge", 800))).To(Succeed())
		again := env.WaitForPhase(ns, "order-5001-charge", v1alpha1.PhaseSucceeded)
		Expect(specenv.Reasons(again)).To(ContainElement(v1alpha1.ReasonSettledByArchive))
		Expect(again.Status.KeptUntil).To(Equal(promised))
		Expect(downstream.Requests(key)).To(Equal(1))
		recreate(again)

		By("past the promise the key means a new intent")
		clock.Step(23 * time.Hour)
		Expect(k8s.Create(ctx, charge("order-5001-charge", 800))).To(Succeed())
		fresh := env.WaitForPhase(ns, "order-5001-charge", v1alpha1.PhaseSucceeded)
		Expect(fresh.Status.Attempts).To(Equal(int32(1)))
		Expect(downstream.Requests(key)).To(Equal(2))
	})

	It("has the cluster keep its chain's head as a checkpoint, which a rewrite of the database cannot reach", func() {
		Expect(k8s.Create(ctx, charge("order-1301-charge", 1200))).To(Succeed())
		first := env.WaitForPhase(ns, "order-1301-charge", v1alpha1.PhaseSucceeded)
		clock.Step(90 * time.Minute)
		Eventually(gone(first.DeepCopy())).Should(BeTrue())
		head := psql(fmt.Sprintf(`SELECT seq || ':' || hash FROM toolledger_chain_heads WHERE namespace = '%s'`, ns))
		Eventually(func() (string, error) {
			state, err := chainstate.Read(ctx, k8s, operatorNamespace, ns)
			if err != nil || state.Latest() == nil {
				return "", err
			}
			return fmt.Sprintf("%d:%s", state.Latest().Sequence, state.Latest().Hash), nil
		}).Should(Equal(head[0]))
	})

	It("holds a new action while the archive cannot check its key, and dispatches it once it can", func() {
		key := ns + "/order-2001-charge"
		Expect(server.Halt()).To(Succeed())
		Expect(k8s.Create(ctx, charge("order-2001-charge", 1500))).To(Succeed())
		Eventually(func() string {
			a := env.Get(ns, "order-2001-charge")
			c := meta.FindStatusCondition(a.Status.Conditions, v1alpha1.ConditionReady)
			if c == nil {
				return ""
			}
			return string(a.Status.Phase) + " " + c.Reason + ": " + c.Message
		}).Should(And(HavePrefix("Accepted ArchiveUnavailable: waiting for the archive to check key order-2001-charge before the first dispatch: "),
			ContainSubstring("the archive cannot be used")))
		Consistently(func() int { return downstream.Requests(key) }, 2*time.Second).Should(BeZero())
		Expect(env.Get(ns, "order-2001-charge").Status.Attempts).To(BeZero())

		By("the archive is back: the key is checked and the action dispatched, once")
		Expect(server.Resume(ctx)).To(Succeed())
		Eventually(func() v1alpha1.Phase { return env.Get(ns, "order-2001-charge").Status.Phase }, 2*time.Minute).Should(Equal(v1alpha1.PhaseSucceeded))
		Expect(downstream.Requests(key)).To(Equal(1))
	})

	It("has the HTTP front fail closed with 503 while the archive cannot check a key, and answer the one charge once it can", func() {
		gctx, cancel := context.WithCancel(ctx)
		DeferCleanup(cancel)
		g, err := mcpgateway.New(gctx, mcpgateway.Options{Config: env.Config, Namespace: ns, Wait: 2 * time.Second, Logger: GinkgoLogr})
		Expect(err).NotTo(HaveOccurred())
		Expect(g.Run(gctx)).To(Succeed())
		Eventually(g.Tools).Should(ContainElement("charge"))
		handler, err := g.HTTPHandler(mcpgateway.HTTPOptions{LocalOnly: true})
		Expect(err).NotTo(HaveOccurred())
		front := httptest.NewServer(handler)
		DeferCleanup(front.Close)
		post := func() *http.Response {
			GinkgoHelper()
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, front.URL+mcpgateway.FrontPath+"charge",
				strings.NewReader(`{"amount":1500,"currency":"EUR","customer":"cus_1"}`))
			Expect(err).NotTo(HaveOccurred())
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", "order-9001")
			resp, err := http.DefaultClient.Do(req)
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(resp.Body.Close)
			return resp
		}

		Expect(server.Halt()).To(Succeed())
		resp := post()
		Expect(resp.StatusCode).To(Equal(http.StatusServiceUnavailable))
		Expect(resp.Header.Get("Retry-After")).To(Equal("5"))
		body, err := io.ReadAll(resp.Body)
		Expect(err).NotTo(HaveOccurred())
		Expect(string(body)).To(And(ContainSubstring(`"code":"service_unavailable"`), ContainSubstring("is not executed until the key is checked")))
		name := resp.Header.Get("Toolledger-Key")
		Expect(name).NotTo(BeEmpty())

		By("a UCP call through MCP: service_unavailable, retry after 5s")
		serverSide, clientSide := mcp.NewInMemoryTransports()
		ss, err := g.Server().Connect(ctx, serverSide, nil)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(ss.Close)
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "ucp-agent", Version: "v1"}, nil).Connect(ctx, clientSide, nil)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(cs.Close)
		_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "charge", Arguments: map[string]any{
			"meta": map[string]any{"idempotency-key": "order-9002"}, "amount": 1600, "currency": "EUR", "customer": "cus_1"}})
		var wire *jsonrpc.Error
		Expect(errors.As(err, &wire)).To(BeTrue(), "%v", err)
		Expect(wire.Code).To(BeEquivalentTo(-32000))
		Expect(string(wire.Data)).To(And(ContainSubstring(`"code":"service_unavailable"`), ContainSubstring(`"retry_after":5`)))
		Consistently(func() int { return downstream.Requests(ns + "/" + name) }, time.Second).Should(BeZero())

		By("the archive is back: a retry under the key gets the one charge")
		Expect(server.Resume(ctx)).To(Succeed())
		Eventually(func() int { return post().StatusCode }, 2*time.Minute, time.Second).Should(Equal(http.StatusOK))
		Expect(post().Header.Get("Idempotent-Replayed")).To(Equal("true"))
		Expect(downstream.Requests(ns + "/" + name)).To(Equal(1))
	})

	It("moves the Tombstones written before it had an archive into it, and keeps answering their keys", func() {
		key := ns + "/order-3001-charge"
		// A Tombstone as a manager without an archive wrote it, before this
		// one started: only the manager may write one (the guard policy).
		asManager, err := client.New(testenv.AsManager(env.Config), client.Options{Scheme: k8s.Scheme()})
		Expect(err).NotTo(HaveOccurred())
		original := chargeAction(ns, "order-3001-charge", 4200)
		// The request's digest, as the manager computes it (it does not
		// cover the key): that of the same request under another key.
		Expect(k8s.Create(ctx, chargeAction(ns, "order-3000-charge", 4200))).To(Succeed())
		digest := env.WaitForPhase(ns, "order-3000-charge", v1alpha1.PhaseSucceeded).Status.RequestDigest
		completed := metav1.NewTime(clock.Now().Add(-time.Hour))
		tomb := &v1alpha1.Tombstone{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "order-3001-charge",
				Labels: map[string]string{v1alpha1.LabelTool: "charge", v1alpha1.LabelToolKind: v1alpha1.KindTool}},
			Record: v1alpha1.TombstoneRecord{ActionUID: "3f1c2a9e-0000-4000-8000-000000003001", RequestDigest: digest, Phase: v1alpha1.PhaseSucceeded,
				ExternalRef: "ch_before_the_archive", Attempts: 1, CompletionTime: completed, ToolRef: v1alpha1.ToolReference{Kind: v1alpha1.KindTool, Name: "charge"},
				IdempotencyClass: v1alpha1.NonRepeatable, Cause: v1alpha1.TombstoneCauseDeleted, DeletionTime: completed},
		}
		Expect(asManager.Create(ctx, tomb)).To(Succeed())

		By("the sweep archives it, then deletes it")
		Eventually(gone(tomb)).Should(BeTrue())
		Expect(psql(fmt.Sprintf(`SELECT uid, external_ref, request_digest, guards_key, cause, action->>'kind'
			FROM toolledger_records WHERE namespace = '%s' AND key = 'order-3001-charge'`, ns))).To(Equal([]string{
			fmt.Sprintf("3f1c2a9e-0000-4000-8000-000000003001|ch_before_the_archive|%s|t|Deleted|Tombstone", digest)}))

		By("its key is answered from the archive")
		Expect(k8s.Create(ctx, original)).To(Succeed())
		again := env.WaitForPhase(ns, "order-3001-charge", v1alpha1.PhaseSucceeded)
		Expect(again.Status.ExternalRef).To(Equal("ch_before_the_archive"))
		Expect(specenv.Reasons(again)).To(ContainElement(v1alpha1.ReasonSettledByArchive))
		Expect(downstream.Requests(key)).To(BeZero())
	})

	It("keeps the key of a moved Tombstone for its Tool's own keyRetention, not the archive's default", func() {
		key := ns + "/order-3101-refund"
		// A Tool that sets no keyRetention: without an archive its
		// Tombstones keep their keys for good.
		env.CreateTool(ns, "refund", testenv.WithClass(v1alpha1.NonRepeatable))
		asManager, err := client.New(testenv.AsManager(env.Config), client.Options{Scheme: k8s.Scheme()})
		Expect(err).NotTo(HaveOccurred())
		// Older than the archive's default keyRetention (90 days).
		completed := metav1.NewTime(clock.Now().Add(-100 * 24 * time.Hour))
		tomb := v1alpha1.NewTombstone(ns, "order-3101-refund", v1alpha1.TombstoneRecord{ActionUID: "3f1c2a9e-0000-4000-8000-000000003101",
			RequestDigest: "sha256:before-the-archive", Phase: v1alpha1.PhaseSucceeded, ExternalRef: "re_kept_for_good", Attempts: 1,
			CompletionTime: completed, ToolRef: v1alpha1.ToolReference{Name: "refund"}, IdempotencyClass: v1alpha1.NonRepeatable,
			Cause: v1alpha1.TombstoneCauseDeleted, DeletionTime: completed})
		Expect(asManager.Create(ctx, tomb)).To(Succeed())
		Eventually(gone(tomb)).Should(BeTrue())

		By("its key still answers: a request under it is refused, never sent")
		refund := chargeAction(ns, "order-3101-refund", 700)
		refund.Spec.ToolRef.Name = "refund"
		refused := refusedThenGone(refund)
		Expect(refused.Status.Error.Reason).To(Equal(v1alpha1.ReasonArchiveConflict))
		Expect(refused.Status.Error.Message).To(ContainSubstring("sha256:before-the-archive"))
		Expect(downstream.Requests(key)).To(BeZero())
	})

	It("answers no key of the tenant from the records of an earlier namespace of the same name: it holds the key until the earlier life is decided", func() {
		key := ns + "/order-1201-charge"
		By("the archive holds a record of a namespace this name had before, archived with that namespace's uid")
		store, err := archive.Open(ctx, dsn)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(store.Close)
		earlier := chargeAction(ns, "order-1201-charge", 1200)
		// Within the tool's keyRetention: the key would be kept, were it
		// this namespace's.
		earlier.UID, earlier.CreationTimestamp = "0ld0ld00-0000-4000-8000-000000001201", metav1.NewTime(clock.Now().Add(-2*time.Hour))
		completed := metav1.NewTime(clock.Now().Add(-time.Hour))
		earlier.Status = v1alpha1.ToolActionStatus{Phase: v1alpha1.PhaseSucceeded, Attempts: 1, ExternalRef: "ch_earlier_tenant",
			RequestDigest: "sha256:earlier", CompletionTime: &completed}
		rec, err := archive.NewRecord(earlier, "an-earlier-namespace-uid", nil, v1alpha1.TombstoneCauseDeleted, "", completed.Time)
		Expect(err).NotTo(HaveOccurred())
		Expect(store.Keep(ctx, rec, archive.Link{})).Error().NotTo(HaveOccurred())

		By("the tenant's own action under the key waits, neither dispatched nor answered with the earlier tenant's reference")
		Expect(k8s.Create(ctx, charge("order-1201-charge", 1200))).To(Succeed())
		Eventually(func(g Gomega) {
			a := env.Get(ns, "order-1201-charge")
			g.Expect(a.Status.Phase).To(Equal(v1alpha1.PhaseAccepted))
			g.Expect(conditionWithReason(a, v1alpha1.ReasonEarlierNamespaceKey)).NotTo(BeNil(), "conditions: %+v", a.Status.Conditions)
		}).Should(Succeed())
		Consistently(func() int { return downstream.Requests(key) }, time.Second).Should(BeZero())

		By("released for this namespace, the key is a new intent: dispatched once")
		Expect(k8s.Create(ctx, &v1alpha1.EarlierLifeDecision{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "release"},
			Spec: v1alpha1.EarlierLifeDecisionSpec{EarlierLife: "an-earlier-namespace-uid", Decision: v1alpha1.LifeRelease, Reason: "a new tenant"}})).To(Succeed())
		fresh := env.WaitForPhase(ns, "order-1201-charge", v1alpha1.PhaseSucceeded)
		Expect(fresh.Status.Attempts).To(Equal(int32(1)))
		Expect(fresh.Status.ExternalRef).NotTo(Equal("ch_earlier_tenant"))
		Expect(downstream.Requests(key)).To(Equal(1))
	})

	It("does not archive a record again that its archived key answered, however often it is applied again", func() {
		Expect(k8s.Create(ctx, charge("order-1101-charge", 1200))).To(Succeed())
		first := env.WaitForPhase(ns, "order-1101-charge", v1alpha1.PhaseSucceeded)
		clock.Step(90 * time.Minute)
		Eventually(gone(first.DeepCopy())).Should(BeTrue())
		head := psql(fmt.Sprintf(`SELECT seq FROM toolledger_chain_heads WHERE namespace = '%s'`, ns))

		By("a GitOps tool applies the manifest again after each retirement, and once with a changed amount, which leaves at once")
		for i := range 2 {
			Expect(k8s.Create(ctx, charge("order-1101-charge", 1200))).To(Succeed())
			Eventually(func() bool { return env.Get(ns, "order-1101-charge").Status.Phase.IsTerminal() }).Should(BeTrue(), "application %d", i+1)
			clock.Step(90 * time.Minute)
			Eventually(gone(env.Get(ns, "order-1101-charge"))).Should(BeTrue())
		}
		refusedThenGone(charge("order-1101-charge", 9900))
		Expect(psql(fmt.Sprintf(`SELECT uid FROM toolledger_records WHERE namespace = '%s' AND key = 'order-1101-charge'`, ns))).
			To(Equal([]string{string(first.UID)}), "one row: the original's")
		Expect(psql(fmt.Sprintf(`SELECT seq FROM toolledger_chain_heads WHERE namespace = '%s'`, ns))).To(Equal(head), "no new link")
		Expect(downstream.Requests(ns + "/order-1101-charge")).To(Equal(1))
	})

	It("moves a finished record out of etcd after the archive's recordRetention when its Tool sets none", func() {
		env.CreateTool(ns, "refund", testenv.WithClass(v1alpha1.NonRepeatable))
		refund := chargeAction(ns, "order-4001-refund", 700)
		refund.Spec.ToolRef.Name = "refund"
		Expect(k8s.Create(ctx, refund)).To(Succeed())
		done := env.WaitForPhase(ns, "order-4001-refund", v1alpha1.PhaseSucceeded)

		By("within the archive's recordRetention the record stays in etcd")
		clock.Step(9 * time.Minute)
		Consistently(gone(done.DeepCopy()), time.Second).Should(BeFalse())

		By("past it, the record leaves etcd for the archive")
		clock.Step(2 * time.Minute)
		Eventually(gone(done.DeepCopy())).Should(BeTrue())
		Expect(psql(fmt.Sprintf(`SELECT uid, cause FROM toolledger_records WHERE namespace = '%s' AND key = 'order-4001-refund'`, ns))).
			To(Equal([]string{fmt.Sprintf("%s|RecordRetention", done.UID)}))
	})
})

// With an archive, a tool that sets no keyRetention keeps its keys for the
// manager's --archive-key-retention, and --archive-history-retention later
// the record leaves the archive too.
var _ = Describe("The archive's key and history retentions", func() {
	It("frees a key after the archive's default keyRetention and prunes its record after the history retention", func() {
		ctx := context.Background()
		ns := env.NewTenant()
		server, err := testenv.StartPostgres(ctx, "")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(server.Stop)
		clock := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
		stop, err := testenv.StartManager(testenv.AsManager(env.Config), app.Options{ExecutorID: "archive-retentions", LeaseGrace: time.Second,
			Clock: clock, RetentionSweep: 200 * time.Millisecond, ArchiveDSN: server.DSN, ArchiveRecordRetention: 10 * time.Minute,
			Namespace: env.NewOperatorNamespace(), ArchiveBindingSettle: time.Millisecond,
			ArchiveKeyRetention: 48 * time.Hour, ArchiveHistoryRetention: 24 * time.Hour,
			// The suite's other specs leave Tombstones, which this manager
			// moves into its archive within each sweep before it looks at
			// this spec's records: fast, so that a sweep comes round soon.
			RetentionRate: 1000})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { _ = stop() })
		env.CreateTool(ns, "charge", testenv.WithClass(v1alpha1.NonRepeatable))
		key := ns + "/order-4001-charge"
		rows := func(uid types.UID) func() (int, error) {
			return func() (int, error) {
				conn, err := pgx.Connect(ctx, server.DSN)
				if err != nil {
					return 0, err
				}
				defer conn.Close(ctx)
				var n int
				return n, conn.QueryRow(ctx, `SELECT count(*) FROM toolledger_records WHERE uid = $1`, string(uid)).Scan(&n)
			}
		}

		Expect(k8s.Create(ctx, chargeAction(ns, "order-4001-charge", 1200))).To(Succeed())
		first := env.WaitForPhase(ns, "order-4001-charge", v1alpha1.PhaseSucceeded)
		Expect(first.Status.KeptUntil.Time).To(BeTemporally("==", first.Status.CompletionTime.Add(48*time.Hour)), "keptUntil by the archive's default")
		clock.Step(11 * time.Minute)
		Eventually(gone(first.DeepCopy())).Should(BeTrue())
		Eventually(rows(first.UID)).Should(Equal(1))

		By("within the default keyRetention the key answers from the archive")
		clock.Step(46 * time.Hour)
		Expect(k8s.Create(ctx, chargeAction(ns, "order-4001-charge", 1200))).To(Succeed())
		again := env.WaitForPhase(ns, "order-4001-charge", v1alpha1.PhaseSucceeded)
		Expect(specenv.Reasons(again)).To(ContainElement(v1alpha1.ReasonSettledByArchive))
		Expect(again.Status.KeptUntil).To(Equal(first.Status.KeptUntil), "the archived record's keptUntil, read from PostgreSQL")
		Expect(downstream.Requests(key)).To(Equal(1))
		recreate(again)

		By("past it the key means a new intent, and the first record is still readable")
		clock.Step(2 * time.Hour)
		Expect(k8s.Create(ctx, chargeAction(ns, "order-4001-charge", 1200))).To(Succeed())
		fresh := env.WaitForPhase(ns, "order-4001-charge", v1alpha1.PhaseSucceeded)
		Expect(fresh.Status.Attempts).To(Equal(int32(1)))
		Expect(downstream.Requests(key)).To(Equal(2))
		Consistently(rows(first.UID), time.Second).Should(Equal(1))

		By("a history retention after the key was freed, the first record leaves the archive; the new one stays")
		clock.Step(23 * time.Hour)
		Consistently(rows(first.UID), time.Second).Should(Equal(1), "the history retention has not passed")
		clock.Step(time.Hour)
		Eventually(rows(first.UID)).Should(BeZero())
		clock.Step(11 * time.Minute)
		Eventually(gone(fresh.DeepCopy())).Should(BeTrue())
		Eventually(rows(fresh.UID)).Should(Equal(1))
	})
})
