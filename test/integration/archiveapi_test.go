package integration

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	archivev1alpha1 "github.com/toolledger/toolledger/api/archive/v1alpha1"
	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/cmd/manager/app"
	"github.com/toolledger/toolledger/internal/archive"
	"github.com/toolledger/toolledger/internal/archiveapi"
	"github.com/toolledger/toolledger/internal/kubectlplugin"
	"github.com/toolledger/toolledger/internal/testenv"
	"github.com/toolledger/toolledger/internal/webconsole"
)

// The archive API serves records that left etcd through the API server's
// aggregation layer, authorized as the caller: RBAC on
// archivedtoolactions.archive.toolledger.dev decides who reads which
// tenant's history. Every read here goes through the real kube-apiserver.
var _ = Describe("The archive API", Ordered, func() {
	const reader = "archive-reader-1"
	var (
		ctx         context.Context
		ns, other   string
		clock       *clocktesting.FakeClock
		kubeconfig  string
		apiAddr     string
		dsn         string
		asReader    client.Client
		archived    map[string]*v1alpha1.ToolAction
		scheme      = app.Scheme()
		readerScope = func(cfg *rest.Config) client.Client {
			GinkgoHelper()
			c, err := client.New(cfg, client.Options{Scheme: scheme})
			Expect(err).NotTo(HaveOccurred())
			return c
		}
	)
	Expect(archivev1alpha1.AddToScheme(scheme)).To(Succeed())
	asAdmin := func() client.Client { return readerScope(env.Config) }

	kubectl := func(args ...string) (string, string, error) {
		GinkgoHelper()
		path, err := exec.LookPath("kubectl")
		Expect(err).NotTo(HaveOccurred(), "kubectl must be on PATH")
		var out, errOut bytes.Buffer
		cmd := exec.CommandContext(ctx, path, append([]string{"--kubeconfig", kubeconfig}, args...)...)
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err = cmd.Run()
		return out.String(), errOut.String(), err
	}

	// readerConsole serves the web console as the reader, and returns a
	// reader of its pages: their status and body.
	readerConsole := func(namespace string) func(path string) (int, string) {
		GinkgoHelper()
		readerConfig := rest.CopyConfig(env.Config)
		readerConfig.Impersonate = rest.ImpersonationConfig{UserName: reader}
		console, err := webconsole.New(ctx, webconsole.Options{Config: readerConfig, Namespace: namespace, Logger: logf.Log.WithName("archive-console")})
		Expect(err).NotTo(HaveOccurred())
		server := httptest.NewServer(console)
		DeferCleanup(server.Close)
		return func(path string) (int, string) {
			GinkgoHelper()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, server.URL+path, nil)
			Expect(err).NotTo(HaveOccurred())
			resp, err := http.DefaultClient.Do(req)
			Expect(err).NotTo(HaveOccurred())
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			Expect(err).NotTo(HaveOccurred())
			return resp.StatusCode, string(body)
		}
	}

	BeforeAll(func() {
		ctx = context.Background()
		ns, other = env.NewTenant(), env.NewTenant()
		server, err := testenv.StartPostgres(ctx, "")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(server.Stop)
		dsn = server.DSN
		api, err := testenv.NewArchiveAPI(GinkgoT().TempDir())
		Expect(err).NotTo(HaveOccurred())
		// The manager serves the archive API on a listener of a port the
		// kernel chose: a port picked free beforehand could be taken by
		// another program before the manager listens on it.
		apiListener, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
		Expect(err).NotTo(HaveOccurred())
		apiAddr = apiListener.Addr().String()
		clock = clocktesting.NewFakeClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
		stop, err := testenv.StartManager(testenv.AsManager(env.Config), app.Options{ExecutorID: "archive-api", LeaseGrace: time.Second,
			Clock: clock, RetentionSweep: 200 * time.Millisecond, ArchiveDSN: server.DSN, ArchiveRecordRetention: time.Minute,
			Namespace: env.NewOperatorNamespace(), ArchiveBindingSettle: time.Millisecond,
			ArchiveAPIListener: apiListener, ArchiveAPICertDir: api.CertDir})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { _ = stop() })
		port, err := testenv.PortOf(apiAddr)
		Expect(err).NotTo(HaveOccurred())
		registering, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		Expect(api.Register(registering, k8s, port)).To(Succeed())
		Expect(testenv.WaitAvailable(registering, k8s)).To(Succeed())

		remove, err := testenv.InstallRBAC(ctx, env.Config, k8s, "archive-api", "role_viewer.yaml", "role_auditor.yaml")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(remove)
		Expect(k8s.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: reader},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "toolledger-viewer"},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: reader}},
		})).To(Succeed())
		// The reader audits its tenant too: it verifies the archived chain.
		Expect(k8s.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: reader + "-auditor"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "toolledger-auditor"},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: reader}},
		})).To(Succeed())
		readerConfig := rest.CopyConfig(env.Config)
		readerConfig.Impersonate = rest.ImpersonationConfig{UserName: reader}
		asReader = readerScope(readerConfig)
		kubeconfig = filepath.Join(GinkgoT().TempDir(), "kubeconfig")
		_, err = env.AddAdmin("archive-api-admin", kubeconfig)
		Expect(err).NotTo(HaveOccurred())

		By("three actions succeed, two in the reader's tenant and one in another, and retire to the archive")
		archived = map[string]*v1alpha1.ToolAction{}
		for i, key := range []string{ns + "/order-3002-charge", ns + "/order-3001-charge", other + "/order-3001-charge"} {
			namespace, name := filepath.Split(key)
			namespace = filepath.Clean(namespace)
			if i == 0 || namespace == other {
				env.CreateTool(namespace, "charge", testenv.WithClass(v1alpha1.NonRepeatable))
			}
			Expect(k8s.Create(ctx, chargeAction(namespace, name, int64(1000+i)))).To(Succeed())
			archived[key] = env.WaitForPhase(namespace, name, v1alpha1.PhaseSucceeded)
		}
		clock.Step(2 * time.Minute)
		for _, action := range archived {
			Eventually(gone(action.DeepCopy())).Should(BeTrue())
		}
	})

	It("answers a get with the record as it was retired, and why it left etcd", func() {
		first := archived[ns+"/order-3001-charge"]
		var got archivev1alpha1.ArchivedToolAction
		Expect(asReader.Get(ctx, client.ObjectKey{Namespace: ns, Name: "order-3001-charge"}, &got)).To(Succeed())
		Expect(got.UID).To(Equal(first.UID))
		Expect(got.Spec.Parameters["amount"].Raw).To(MatchJSON(`1001`))
		Expect(got.Status.Phase).To(Equal(v1alpha1.PhaseSucceeded))
		Expect(got.Status.ExternalRef).To(Equal(first.Status.ExternalRef))
		Expect(got.Status.RequestDigest).To(Equal(first.Status.RequestDigest))
		Expect(got.Archive.Cause).To(Equal(v1alpha1.TombstoneCauseRecordRetention))
		Expect(got.Archive.GuardsKey).To(BeTrue())
		Expect(got.Archive.IdempotencyClass).To(Equal(v1alpha1.NonRepeatable))
		Expect(got.Finalizers).To(BeEmpty())
	})

	It("lists a tenant's records in key order, in pages", func() {
		var page archivev1alpha1.ArchivedToolActionList
		Expect(asReader.List(ctx, &page, client.InNamespace(ns), client.Limit(1))).To(Succeed())
		Expect(page.Items).To(HaveLen(1))
		Expect(page.Items[0].Name).To(Equal("order-3001-charge"))
		Expect(page.Continue).NotTo(BeEmpty())
		var rest archivev1alpha1.ArchivedToolActionList
		Expect(asReader.List(ctx, &rest, client.InNamespace(ns), client.Limit(1), client.Continue(page.Continue))).To(Succeed())
		Expect(rest.Items).To(HaveLen(1))
		Expect(rest.Items[0].Name).To(Equal("order-3002-charge"))
		Expect(rest.Continue).To(BeEmpty())

		stdout, stderr, err := kubectl("--as", reader, "-n", ns, "get", "archivedtoolactions")
		Expect(err).NotTo(HaveOccurred(), stderr)
		Expect(stdout).To(MatchRegexp(`(?m)^NAME +TOOL +PHASE +EXTERNAL-REF +ATTEMPTS +CAUSE +GUARDS-KEY +COMPLETED\n`+
			`order-3001-charge +charge +Succeeded +%s +1 +RecordRetention +true +\S+\norder-3002-charge +charge +Succeeded +%s +1 +RecordRetention +true +\S+\n$`,
			archived[ns+"/order-3001-charge"].Status.ExternalRef, archived[ns+"/order-3002-charge"].Status.ExternalRef))
	})

	It("refuses another tenant's records, through every way of asking", func() {
		err := asReader.Get(ctx, client.ObjectKey{Namespace: other, Name: "order-3001-charge"}, &archivev1alpha1.ArchivedToolAction{})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "get: %v", err)
		err = asReader.List(ctx, &archivev1alpha1.ArchivedToolActionList{}, client.InNamespace(other))
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "list: %v", err)
		err = asReader.List(ctx, &archivev1alpha1.ArchivedToolActionList{})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "list of every namespace: %v", err)
		_, stderr, err := kubectl("--as", reader, "-n", other, "get", "archivedtoolaction", "order-3001-charge")
		Expect(err).To(HaveOccurred())
		Expect(stderr).To(ContainSubstring(fmt.Sprintf(`Error from server (Forbidden): archivedtoolactions.archive.toolledger.dev "order-3001-charge" is forbidden: User "%s" cannot get resource "archivedtoolactions" in API group "archive.toolledger.dev" in the namespace "%s"`, reader, other)))

		By("a request that does not come through the API server names no user it is trusted with")
		transport := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // the point is the missing client certificate
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("https://%s/apis/archive.toolledger.dev/v1alpha1/namespaces/%s/archivedtoolactions/order-3001-charge", apiAddr, other), nil)
		Expect(err).NotTo(HaveOccurred())
		req.Header.Set("X-Remote-User", "system:admin")
		req.Header.Set("X-Remote-Group", "system:masters")
		resp, err := (&http.Client{Transport: transport}).Do(req)
		Expect(err).NotTo(HaveOccurred())
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		Expect(resp.StatusCode).To(Equal(http.StatusUnauthorized))
		var status metav1.Status
		Expect(json.Unmarshal(body, &status)).To(Succeed())
		Expect(status.Message).To(Equal("the archive API answers only requests forwarded by the API server (its front-proxy client certificate); use kubectl or a Kubernetes client"))
	})

	It("shows an archived record in kubectl toolledger status, to its tenant only", func() {
		plugin := func(args ...string) (int, string, string) {
			var out, errOut bytes.Buffer
			code := kubectlplugin.Run(ctx, genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &errOut},
				append([]string{"--kubeconfig", kubeconfig, "--as", reader}, args...))
			return code, out.String(), errOut.String()
		}
		first := archived[ns+"/order-3001-charge"]
		code, stdout, stderr := plugin("-n", ns, "status", "order-3001-charge")
		Expect(code).To(BeZero(), stderr)
		Expect(stdout).To(MatchRegexp(`(?m)^Archived: +in the archive; left etcd \S+ \(RecordRetention: the tool's recordRetention passed, by toolledger \(archive-api\)\); it was dispatched, so it answers its key until the tool's keyRetention has passed since it finished$`))
		Expect(stdout).To(MatchRegexp(`(?m)^Phase: +Succeeded$`))
		Expect(stdout).To(MatchRegexp(`(?m)^External ref: +%s$`, first.Status.ExternalRef))
		Expect(stdout).To(MatchRegexp(`(?m)^Request digest: +%s$`, first.Status.RequestDigest))
		Expect(stdout).To(MatchRegexp(`(?m)^ */amount +yes +1001$`))

		code, stdout, stderr = plugin("-n", ns, "status", "order-3001-charge", "-o", "json")
		Expect(code).To(BeZero(), stderr)
		var printed archivev1alpha1.ArchivedToolAction
		Expect(json.Unmarshal([]byte(stdout), &printed)).To(Succeed())
		Expect(printed.Kind).To(Equal("ArchivedToolAction"))
		Expect(printed.UID).To(Equal(first.UID))

		code, _, stderr = plugin("-n", other, "status", "order-3001-charge")
		Expect(code).To(Equal(1))
		Expect(stderr).To(ContainSubstring(fmt.Sprintf(`User "%s" cannot get resource "toolactions"`, reader)))

		code, _, stderr = plugin("-n", ns, "status", "order-9999-charge")
		Expect(code).To(Equal(1))
		Expect(stderr).To(ContainSubstring(`ToolAction "order-9999-charge" not found in namespace "` + ns + `", no Tombstone keeps that key, and the archive holds no record of it`))
	})

	It("shows an archived record on the web console's record page, to its tenant only", func() {
		page := readerConsole(ns)
		first := archived[ns+"/order-3001-charge"]
		status, body := page("/actions/" + ns + "/order-3001-charge")
		Expect(status).To(Equal(http.StatusOK), body)
		Expect(body).To(ContainSubstring(`<span class="phase phase-succeeded" id="phase">Succeeded</span>`))
		Expect(body).To(MatchRegexp(`<dd id="archived">in the archive; left etcd \S+ \(RecordRetention: the tool&#39;s recordRetention passed, by toolledger \(archive-api\)\); it was dispatched, so it answers its key until the tool&#39;s keyRetention has passed since it finished</dd>`))
		Expect(body).To(ContainSubstring("<code>" + first.Status.ExternalRef + "</code>"))
		Expect(body).NotTo(ContainSubstring("data-events="), "an archived record has no live events to follow")

		status, body = page("/actions/" + other + "/order-3001-charge")
		Expect(status).To(Equal(http.StatusForbidden), body)
		Expect(body).NotTo(ContainSubstring(archived[other+"/order-3001-charge"].Status.ExternalRef))

		status, body = page("/actions/" + ns + "/order-9999-charge")
		Expect(status).To(Equal(http.StatusNotFound))
		Expect(body).To(ContainSubstring("ToolAction order-9999-charge not found in namespace " + ns + ", no Tombstone keeps that key, and the archive holds no record of it."))
	})

	It("describes ArchivedToolAction to kubectl explain, with the ToolAction's own field docs", func() {
		// The API server aggregates the OpenAPI document on its own schedule.
		Eventually(func() string {
			stdout, _, _ := kubectl("explain", "archivedtoolactions.archive.guardsKey")
			return stdout
		}, time.Minute, time.Second).Should(ContainSubstring("Whether the record keeps its key"))
		stdout, stderr, err := kubectl("explain", "archivedtoolactions.spec.toolRef")
		Expect(err).NotTo(HaveOccurred(), stderr)
		Expect(stdout).To(ContainSubstring("GROUP:      archive.toolledger.dev"))
		Expect(stdout).To(MatchRegexp(`FIELDS:\n\s+kind\s`))
		stdout, stderr, err = kubectl("explain", "archivedtoolactions.archive.omitted")
		Expect(err).NotTo(HaveOccurred(), stderr)
		Expect(stdout).To(ContainSubstring("The fields a list's item leaves out"))
		stdout, stderr, err = kubectl("explain", "archivechains.status.head")
		Expect(err).NotTo(HaveOccurred(), stderr)
		Expect(stdout).To(ContainSubstring("The newest link the verification reached"))
	})

	It("says a key the archive does not hold is not found", func() {
		err := asReader.Get(ctx, client.ObjectKey{Namespace: ns, Name: "order-9999-charge"}, &archivev1alpha1.ArchivedToolAction{})
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "get: %v", err)
	})

	It("searches the history by requester and by tool over etcd and the archive, in order, and a tenant only its own", func() {
		hist := env.NewTenant()
		removeIdentity, err := testenv.InstallIdentityPolicy(ctx, env.Config, k8s, hist, "archive-history")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(removeIdentity)
		removeAgent, err := testenv.InstallRBAC(ctx, env.Config, k8s, "archive-history", "role_agent.yaml")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(removeAgent)
		bind := func(user, role string) {
			GinkgoHelper()
			Expect(k8s.Create(ctx, &rbacv1.RoleBinding{
				ObjectMeta: metav1.ObjectMeta{Namespace: hist, Name: user + "-" + role},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
				Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
			})).To(Succeed())
		}
		bind("alice", "toolledger-agent")
		bind("bob", "toolledger-agent")
		bind(reader, "toolledger-viewer")
		bind(reader, "toolledger-auditor")
		env.CreateTool(hist, "charge", testenv.WithClass(v1alpha1.NonRepeatable))
		env.CreateTool(hist, "refund", testenv.WithClass(v1alpha1.NonRepeatable))
		as := func(user string) client.Client {
			cfg := rest.CopyConfig(env.Config)
			cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
			return readerScope(cfg)
		}
		run := func(user, name, tool string) *v1alpha1.ToolAction {
			GinkgoHelper()
			action := chargeAction(hist, name, 500)
			action.Spec.ToolRef.Name = tool
			Expect(as(user).Create(ctx, action)).To(Succeed())
			done := env.WaitForPhase(hist, name, v1alpha1.PhaseSucceeded)
			Expect(done.Annotations).To(HaveKeyWithValue(v1alpha1.RequestedByAnnotation, user))
			// Each finishes a second after the one before, by the manager's clock.
			clock.Step(time.Second)
			return done
		}
		By("two actions finish and retire to the archive; two more finish and stay in etcd")
		older := []*v1alpha1.ToolAction{run("alice", "history-1", "charge"), run("bob", "history-2", "refund")}
		clock.Step(2 * time.Minute)
		for _, action := range older {
			Eventually(gone(action.DeepCopy())).Should(BeTrue())
		}
		run("alice", "history-3", "refund")
		run("alice", "history-4", "charge")

		plugin := func(args ...string) (int, string, string) {
			var out, errOut bytes.Buffer
			code := kubectlplugin.Run(ctx, genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &errOut},
				append([]string{"--kubeconfig", kubeconfig, "--as", reader}, args...))
			return code, out.String(), errOut.String()
		}
		search := func(args ...string) []string {
			GinkgoHelper()
			code, stdout, stderr := plugin(append([]string{"-n", hist, "history", "-o", "json"}, args...)...)
			Expect(code).To(BeZero(), stderr)
			var found struct {
				Items []struct{ Key, Source, RequestedBy string } `json:"items"`
			}
			Expect(json.Unmarshal([]byte(stdout), &found)).To(Succeed())
			var keys []string
			for _, r := range found.Items {
				keys = append(keys, r.Key+"@"+r.Source)
			}
			return keys
		}
		Expect(search("--requester", "alice")).To(Equal([]string{"history-1@archive", "history-3@etcd", "history-4@etcd"}))
		Expect(search("--tool", "charge")).To(Equal([]string{"history-1@archive", "history-4@etcd"}))
		Expect(search("--requester", "bob", "--tool", "refund")).To(Equal([]string{"history-2@archive"}))
		Expect(search("--requester", "carol")).To(BeEmpty())

		code, stdout, stderr := plugin("-n", hist, "history", "--requester", "alice")
		Expect(code).To(BeZero(), stderr)
		Expect(stdout).To(MatchRegexp(`^KEY +TOOL +OUTCOME +EXTERNAL-REF +REQUESTED-BY +APPROVER +ATTEMPTS +COMPLETED +WHERE\n` +
			`history-1 +charge +Succeeded +ch_\S+ +alice +<none> +1 +\S+ +archive\nhistory-3 +refund +Succeeded +ch_\S+ +alice +<none> +1 +\S+ +etcd\n` +
			`history-4 +charge +Succeeded +ch_\S+ +alice +<none> +1 +\S+ +etcd\n$`))

		By("the web console's history page shows the same, and verifies the namespace's chain")
		page := readerConsole(hist)
		status, body := page("/history?namespace=" + hist + "&requester=alice")
		Expect(status).To(Equal(http.StatusOK), body)
		Expect(body).To(ContainSubstring("Searched etcd and the archive."))
		Expect(regexp.MustCompile(`<tr data-key="([^"]+)">`).FindAllStringSubmatch(body, -1)).To(Equal([][]string{
			{`<tr data-key="history-1">`, "history-1"}, {`<tr data-key="history-3">`, "history-3"}, {`<tr data-key="history-4">`, "history-4"}}))
		Expect(body).To(MatchRegexp(`<a href="/actions/%s/history-1">history-1</a></td>\s*<td>charge</td>[\s\S]*?<td class="source">archive</td>`, hist))
		status, body = page("/history?namespace=" + hist + "&verify=1")
		Expect(status).To(Equal(http.StatusOK), body)
		var chain archivev1alpha1.ArchiveChain
		Expect(asReader.Get(ctx, client.ObjectKey{Namespace: hist, Name: archivev1alpha1.ChainName}, &chain)).To(Succeed())
		Expect(chain.Status.Verified).To(BeTrue())
		Expect(chain.Status.Records).To(BeEquivalentTo(2))
		Expect(body).To(ContainSubstring(fmt.Sprintf(`<code class="head">2:%s</code>`, chain.Status.Head.Hash)))
		status, body = page("/history?namespace=" + other + "&tool=charge")
		Expect(status).To(Equal(http.StatusForbidden), body)
		Expect(body).NotTo(ContainSubstring(archived[other+"/order-3001-charge"].Status.ExternalRef))

		By("the reader, bound in two tenants, gets none of a third's")
		code, _, stderr = plugin("-n", other, "history", "--tool", "charge")
		Expect(code).To(Equal(1))
		Expect(stderr).To(ContainSubstring(fmt.Sprintf(`User "%s" cannot list resource "toolactions"`, reader)))
		code, _, stderr = plugin("history", "-A", "--tool", "charge")
		Expect(code).To(Equal(1))
		Expect(stderr).To(ContainSubstring("cannot list resource"))
	})

	// Last: it alters the archive behind the ledger's back.
	It("verifies a tenant's archived history, to its tenant only, and names a record changed or deleted with psql", func() {
		plugin := func(args ...string) (int, string, string) {
			var out, errOut bytes.Buffer
			code := kubectlplugin.Run(ctx, genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &errOut},
				append([]string{"--kubeconfig", kubeconfig}, args...))
			return code, out.String(), errOut.String()
		}
		superuser := func(sql string, args ...any) {
			GinkgoHelper()
			conn, err := pgx.Connect(ctx, dsn)
			Expect(err).NotTo(HaveOccurred())
			defer conn.Close(ctx)
			tag, err := conn.Exec(ctx, sql, args...)
			Expect(err).NotTo(HaveOccurred())
			Expect(tag.RowsAffected()).To(BeEquivalentTo(1))
		}

		By("the reader verifies its tenant's two records; the head is the newest record's link")
		code, stdout, stderr := plugin("--as", reader, "-n", ns, "verify")
		Expect(code).To(BeZero(), stderr)
		var page archivev1alpha1.ArchivedToolActionList
		Expect(asReader.List(ctx, &page, client.InNamespace(ns))).To(Succeed())
		links := map[int64]*archivev1alpha1.ArchivedToolAction{}
		for i := range page.Items {
			Expect(page.Items[i].Archive.Chain).NotTo(BeNil())
			links[page.Items[i].Archive.Chain.Sequence] = &page.Items[i]
		}
		Expect(links).To(HaveKey(BeEquivalentTo(2)))
		Expect(stdout).To(MatchRegexp(`^VERIFIED +FROM +RECORDS +PRUNED +BEFORE-CHAIN +CHECKPOINTS +HEAD\ntrue +start +2 +0 +0 +[01] +2:%s\n$`, links[2].Archive.Chain.Hash))

		By("a head copied now still matches")
		code, stdout, stderr = plugin("--as", reader, "-n", ns, "verify", "--head", fmt.Sprintf("2:%s", links[2].Archive.Chain.Hash))
		Expect(code).To(BeZero(), stderr)
		Expect(stdout).To(ContainSubstring(fmt.Sprintf("%s: the copied head 2:%s matches: nothing up to it was rewritten", ns, links[2].Archive.Chain.Hash)))

		By("another tenant's history is not the reader's to verify")
		code, _, stderr = plugin("--as", reader, "-n", other, "verify")
		Expect(code).To(Equal(1))
		Expect(stderr).To(ContainSubstring(fmt.Sprintf(`User "%s" cannot get resource "archivechains" in API group "archive.toolledger.dev" in the namespace "%s"`, reader, other)))

		By("a superuser changes a record's external reference with psql: a full verification reads every record again")
		changed := links[1]
		superuser(`UPDATE toolledger_records SET external_ref = 'ch_forged' WHERE uid = $1`, string(changed.UID))
		code, stdout, stderr = plugin("--as", reader, "-n", ns, "verify", "--full")
		Expect(code).To(Equal(1))
		at := fmt.Sprintf("record 1 (key %s, uid %s)", changed.Name, changed.UID)
		Expect(stdout).To(ContainSubstring(fmt.Sprintf("%s: the chain breaks at %s: its columns no longer hash to its link: it was changed after it was archived", ns, at)))
		Expect(stdout).To(MatchRegexp(`(?m)^false +start +0 +0 +0 +\d+ +<empty>$`), "nothing before the changed record")
		Expect(stderr).To(Equal(fmt.Sprintf("error: the archived history of namespace %s was altered at %s\n", ns, at)))

		By("a superuser deletes the other tenant's record with psql; an administrator verifies every namespace")
		code, _, stderr = plugin("verify", "-A", "--full")
		Expect(code).To(Equal(1), "the first tenant's chain is still broken")
		Expect(stderr).NotTo(ContainSubstring("namespace " + other))
		superuser(`DELETE FROM toolledger_records WHERE uid = $1`, string(archived[other+"/order-3001-charge"].UID))
		code, _, stderr = plugin("verify", "-n", other)
		Expect(code).To(Equal(1), "from where the last verification ended, the record it reached is gone")
		Expect(stderr).To(ContainSubstring(fmt.Sprintf("the archived history of namespace %s was altered at record 1", other)))
		code, stdout, _ = plugin("verify", "-A", "--full", "-o", "json")
		Expect(code).To(Equal(1))
		var verified struct {
			Items []archivev1alpha1.ArchiveChain `json:"items"`
		}
		Expect(json.Unmarshal([]byte(stdout), &verified)).To(Succeed())
		broken := map[string]string{}
		for _, chain := range verified.Items {
			if chain.Status.Broken != nil {
				broken[chain.Namespace] = chain.Status.Broken.Problem
			}
		}
		Expect(broken).To(HaveKeyWithValue(other, "record 1 is missing: deleted, not pruned"))
		Expect(broken).To(HaveKeyWithValue(ns, "its columns no longer hash to its link: it was changed after it was archived"))
	})
	It("lists records without their parameters, in pages bounded by bytes, and serves a record whole on get", func() {
		bulky := env.NewTenant()
		store, err := archive.Open(ctx, dsn)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(store.Close)
		By("twelve records of a 1 MiB document leave etcd: six sent it as a parameter, six got it back as their result")
		for i := range 12 {
			a, err := testenv.BulkyAction(bulky, fmt.Sprintf("upload-%02d", i), 1<<20, time.Now().Add(-time.Hour))
			Expect(err).NotTo(HaveOccurred())
			if i%2 == 1 {
				a.Name, a.UID = fmt.Sprintf("report-%02d", i), types.UID(fmt.Sprintf("%s-report-%02d", bulky, i))
				a.Status.Result = &apiextensionsv1.JSON{Raw: a.Spec.Parameters["document"].Raw}
				a.Spec.Parameters = map[string]apiextensionsv1.JSON{"folder": a.Spec.Parameters["folder"]}
				delete(a.Annotations, corev1.LastAppliedConfigAnnotation)
			}
			r, err := archive.NewRecord(a, namespaceUID(bulky), nil, v1alpha1.TombstoneCauseRecordRetention, "", time.Now())
			Expect(err).NotTo(HaveOccurred())
			Expect(store.Keep(ctx, r, archive.Link{})).Error().NotTo(HaveOccurred())
		}

		By("a list in pages, as kubectl asks for them, returns each record once, in pages of a few MiB")
		raw, err := kubernetes.NewForConfig(env.Config)
		Expect(err).NotTo(HaveOccurred())
		path := "/apis/archive.toolledger.dev/v1alpha1/namespaces/" + bulky + "/archivedtoolactions"
		seen := map[string]archivev1alpha1.ArchivedToolAction{}
		pages := 0
		for cont := ""; pages == 0 || cont != ""; pages++ {
			req := raw.Discovery().RESTClient().Get().AbsPath(path).Param("limit", "500")
			if cont != "" {
				req = req.Param("continue", cont)
			}
			body, err := req.DoRaw(ctx)
			Expect(err).NotTo(HaveOccurred())
			Expect(len(body)).To(BeNumerically("<=", archiveapi.PageBytes+4<<10), "page %d: a page of %d bytes", pages+1, len(body))
			var page archivev1alpha1.ArchivedToolActionList
			Expect(json.Unmarshal(body, &page)).To(Succeed())
			for _, item := range page.Items {
				Expect(seen).NotTo(HaveKey(item.Name))
				seen[item.Name] = item
			}
			cont = page.Continue
		}
		Expect(seen).To(HaveLen(12))
		Expect(pages).To(BeNumerically(">", 1))

		By("a list's items leave the parameters and kubectl's copy of them out; a get serves them")
		listed := seen["upload-04"]
		Expect(listed.Spec.Parameters).To(BeEmpty())
		Expect(listed.Annotations).NotTo(HaveKey(corev1.LastAppliedConfigAnnotation))
		Expect(listed.Annotations).To(HaveKeyWithValue(v1alpha1.RequestedByAnnotation, "agent-upload-04"))
		Expect(listed.Status.Phase).To(Equal(v1alpha1.PhaseFailed))
		Expect(listed.Archive.Omitted).To(Equal([]string{archive.OmittedParameters, archive.OmittedLastApplied}))
		Expect(seen["report-05"].Archive.Omitted).To(Equal([]string{archive.OmittedParameters}), "a record whose parameters were small")
		var got archivev1alpha1.ArchivedToolAction
		Expect(asAdmin().Get(ctx, client.ObjectKey{Namespace: bulky, Name: "upload-04"}, &got)).To(Succeed())
		Expect(got.Spec.Parameters["document"].Raw).To(HaveLen(1<<20 + 2))
		Expect(got.Annotations).To(HaveKey(corev1.LastAppliedConfigAnnotation))
		Expect(got.Archive.Omitted).To(BeEmpty())

		By("kubectl lists them all, in pages and without")
		for _, chunk := range []string{"500", "0"} {
			stdout, stderr, err := kubectl("-n", bulky, "get", "archivedtoolactions", "--chunk-size="+chunk, "--no-headers")
			Expect(err).NotTo(HaveOccurred(), stderr)
			Expect(strings.Count(stdout, "\n")).To(Equal(12), stdout)
		}
	})
	It("runs a bounded number of history searches at once, and asks the others to come back", func() {
		By("the API server answers the console's lists of ToolActions only once released: slow searches")
		released := make(chan struct{})
		var once sync.Once
		release := func() { once.Do(func() { close(released) }) }
		slow := rest.CopyConfig(env.Config)
		slow.Impersonate = rest.ImpersonationConfig{UserName: reader}
		slow.WrapTransport = func(next http.RoundTripper) http.RoundTripper {
			return roundTripper(func(req *http.Request) (*http.Response, error) {
				if strings.HasSuffix(req.URL.Path, "/toolactions") {
					select {
					case <-released:
					case <-req.Context().Done():
						return nil, req.Context().Err()
					}
				}
				return next.RoundTrip(req)
			})
		}
		console, err := webconsole.New(ctx, webconsole.Options{Config: slow, Namespace: ns, Logger: logf.Log.WithName("slow-console")})
		Expect(err).NotTo(HaveOccurred())
		server := httptest.NewServer(console)
		DeferCleanup(server.Close)
		// Before the server closes, which waits for the searches.
		DeferCleanup(release)
		const searches = 16
		answers := make(chan int, searches)
		for range searches {
			go func() {
				defer GinkgoRecover()
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, server.URL+"/history?namespace="+ns, nil)
				Expect(err).NotTo(HaveOccurred())
				resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
				Expect(err).NotTo(HaveOccurred())
				_ = resp.Body.Close()
				answers <- resp.StatusCode
			}()
		}
		select {
		case code := <-answers:
			Expect(code).To(Equal(http.StatusTooManyRequests))
		case <-time.After(15 * time.Second):
			Fail(fmt.Sprintf("%d searches at once all ran for 15s: nothing bounds them", searches))
		}
		release()
		codes := map[int]int{http.StatusTooManyRequests: 1}
		for range searches - 1 {
			codes[<-answers]++
		}
		Expect(codes[http.StatusOK]).To(BeNumerically(">", 0), "%v", codes)
		Expect(codes[http.StatusOK]+codes[http.StatusTooManyRequests]).To(Equal(searches), "%v", codes)
	})
})

// roundTripper is a function as an http.RoundTripper.
type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// namespaceUID is the uid of namespace, which binds the records archived
// from it.
func namespaceUID(namespace string) types.UID {
	GinkgoHelper()
	var ns corev1.Namespace
	Expect(k8s.Get(context.Background(), client.ObjectKey{Name: namespace}, &ns)).To(Succeed())
	return ns.UID
}
