package webconsole_test

import (
	"context"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/toolledger/toolledger/cmd/manager/app"
	"github.com/toolledger/toolledger/internal/demo"
	"github.com/toolledger/toolledger/internal/testenv"
	"github.com/toolledger/toolledger/internal/testenv/specenv"
	"github.com/toolledger/toolledger/internal/webconsole"
)

// The suite runs the console against a real kube-apiserver and etcd
// (envtest), one toolledger manager and the demo downstream, which counts
// requests and effects per idempotency key. People use it through headless
// Chromium (Debian's chromium, which make test installs), driven by
// chromedp; the console runs in the cluster mode, as a ServiceAccount that
// holds the shipped toolledger-console role only, and every user signs in
// with a ServiceAccount token for the console's audience.
var (
	env        *specenv.Env
	cfg        *rest.Config
	k8s        client.Client
	downstream *demo.Server

	// consoleURL serves the cluster-mode console.
	consoleURL string
	// browser is the running Chromium; each user gets a browser context of
	// their own (their own cookies) with newUserBrowser.
	browser context.Context
)

const (
	audience    = "toolledger-console"
	consoleNS   = "toolledger-console-suite"
	consoleUser = "console"
)

func TestConsole(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Web console suite")
}

var _ = BeforeSuite(func() {
	SetDefaultEventuallyTimeout(30 * time.Second)
	SetDefaultEventuallyPollingInterval(50 * time.Millisecond)

	env = specenv.Start(testenv.SuiteOptions{Manager: &app.Options{ExecutorID: "console-suite", LeaseGrace: 5 * time.Second}})
	cfg, k8s, downstream = env.Config, env.Client, env.Downstream
	ctx := context.Background()

	remove, err := testenv.InstallRBAC(ctx, cfg, k8s, "console-suite",
		"role_agent.yaml", "role_viewer.yaml", "role_approver.yaml", "toolresolution_resolver_role.yaml", "role_console.yaml")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(remove)

	By("running the console as a ServiceAccount with the shipped toolledger-console role only")
	Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: consoleNS}})).To(Succeed())
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: consoleNS, Name: consoleUser}}
	Expect(k8s.Create(ctx, sa)).To(Succeed())
	Expect(k8s.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "toolledger-console-suite"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "toolledger-console"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: consoleNS, Name: consoleUser}},
	})).To(Succeed())
	consoleConfig := rest.AnonymousClientConfig(cfg)
	consoleConfig.BearerToken = token(sa, nil)
	consoleCtx, stopConsole := context.WithCancel(ctx)
	DeferCleanup(stopConsole)
	console, err := webconsole.New(consoleCtx, webconsole.Options{Config: consoleConfig, Audience: audience, Logger: log.Log.WithName("console")})
	Expect(err).NotTo(HaveOccurred())
	server := httptest.NewServer(console) // 127.0.0.1
	DeferCleanup(server.Close)
	consoleURL = server.URL

	By("starting headless Chromium")
	chromium, err := exec.LookPath("chromium")
	Expect(err).NotTo(HaveOccurred(), "the browser tests need Debian's chromium; make test installs it")
	allocator, cancelAllocator := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium),
		chromedp.NoSandbox, // root in CI
		chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-dev-shm-usage", true),
		// Nothing but the console: no component updates, no sync, no
		// safe-browsing look-ups, no traffic beyond 127.0.0.1.
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"),
	)...)
	DeferCleanup(cancelAllocator)
	var cancelBrowser context.CancelFunc
	browser, cancelBrowser = chromedp.NewContext(allocator, chromedp.WithLogf(GinkgoWriter.Printf))
	DeferCleanup(cancelBrowser)
	Expect(chromedp.Do(browser)).To(Succeed())
})

// newUserBrowser returns a tab in a browser context of its own: a user
// with their own cookies, closed when the spec ends.
func newUserBrowser() context.Context {
	GinkgoHelper()
	tab, cancel := chromedp.NewContext(browser, chromedp.WithNewBrowserContext())
	DeferCleanup(cancel)
	tab, cancelTimeout := context.WithTimeout(tab, 90*time.Second)
	DeferCleanup(cancelTimeout)
	Expect(chromedp.Do(tab)).To(Succeed())
	return tab
}

// screenshotDir is where the specs that take the screenshots of docs/console.md write
// them: TOOLLEDGER_SCREENSHOTS (make screenshots sets docs/), else a
// temporary folder.
func screenshotDir() string {
	GinkgoHelper()
	if dir := os.Getenv("TOOLLEDGER_SCREENSHOTS"); dir != "" {
		abs, err := filepath.Abs(dir)
		Expect(err).NotTo(HaveOccurred())
		return abs
	}
	return GinkgoT().TempDir()
}
