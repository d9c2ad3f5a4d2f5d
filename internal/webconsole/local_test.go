package webconsole_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"regexp"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/testenv"
	"github.com/toolledger/toolledger/internal/webconsole"
)

// get reads a page of the local console; Host is the one the URL names
// unless host is set.
func get(target, host string) (int, string) {
	GinkgoHelper()
	req := newRequest(http.MethodGet, target, "", nil)
	if host != "" {
		req.Host = host
	}
	status, _, body := send(req)
	return status, body
}

var _ = Describe("The web console in the local mode", func() {
	It("acts as the kubeconfig's user, answers loopback hosts only, and shows tools, counts and a deleted key's tombstone", func() {
		ctx := context.Background()
		ns := env.NewTenant()
		admin, err := env.AddAdmin("console-local-user", GinkgoT().TempDir()+"/kubeconfig")
		Expect(err).NotTo(HaveOccurred())
		console, err := webconsole.New(ctx, webconsole.Options{Config: admin, Namespace: ns, Logger: log.Log.WithName("local-console")})
		Expect(err).NotTo(HaveOccurred())
		server := httptest.NewServer(console)
		DeferCleanup(server.Close)

		env.CreateTool(ns, "charge", testenv.WithKeyRetention(30*24*time.Hour))
		for _, key := range []string{"order-1", "order-2"} {
			Expect(k8s.Create(ctx, charge(ns, key, "charge", 100, "c-1"))).To(Succeed())
		}
		done := env.WaitForPhase(ns, "order-1", v1alpha1.PhaseSucceeded)
		env.WaitForPhase(ns, "order-2", v1alpha1.PhaseSucceeded)

		By("answering as the kubeconfig's user, in the console's namespace by default")
		status, page := get(server.URL+"/queue", "")
		Expect(status).To(Equal(http.StatusOK))
		Expect(page).To(ContainSubstring(`signed in as <strong id="user">console-local-user</strong>`))
		Expect(page).To(ContainSubstring(`value="` + ns + `"`))
		Expect(page).NotTo(ContainSubstring("Sign out"), "nothing to sign out of")

		By("refusing a request whose Host another site could point at this port")
		status, page = get(server.URL+"/queue", "attacker.example")
		Expect(status).To(Equal(http.StatusForbidden))
		Expect(page).To(ContainSubstring("the local console answers requests for localhost or a loopback address only"))
		status, _ = get(server.URL+"/queue", "localhost")
		Expect(status).To(Equal(http.StatusOK))

		By("listing the tools with their class, adapter, limits and readiness")
		// The catalog controller sets Ready on its own schedule.
		Eventually(func() string { _, page := get(server.URL+"/tools?namespace="+ns, ""); return page }).Should(MatchRegexp(`<td>` + ns + `/charge</td>\s*<td>payments.charge v1</td>\s*<td>KeyProtected</td>\s*<td>http</td>\s*<td>16 in flight, 25/s</td>\s*<td>no</td>\s*<td>720h0m0s</td>\s*<td title="[^"]*">True \(\w+\)</td>`))

		By("counting the actions by tool and phase")
		status, page = get(server.URL+"/dashboard?namespace="+ns, "")
		Expect(status).To(Equal(http.StatusOK))
		// Pending, Accepted, AwaitingApproval, Executing, RetryScheduled, Unknown, Escalated, Succeeded, Failed, Total.
		Expect(page).To(MatchRegexp(`<tr><td>` + ns + `</td><td>charge</td>(<td></td>){7}<td>2</td><td></td><td>2</td></tr>`))

		By("showing the tombstone of a deleted key")
		Expect(k8s.Delete(ctx, done)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(done), &v1alpha1.ToolAction{}))
		}).Should(BeTrue())
		status, page = get(server.URL+"/actions/"+ns+"/order-1", "")
		Expect(status).To(Equal(http.StatusOK))
		Expect(page).To(ContainSubstring(`<span class="phase phase-deleted" id="phase">Deleted</span>`))
		Expect(page).To(ContainSubstring(`<dd id="outcome">Succeeded</dd>`))
		Expect(page).To(ContainSubstring("<code>" + done.Status.ExternalRef + "</code>"))
		freed := done.Status.CompletionTime.Add(30 * 24 * time.Hour).UTC().Format(time.RFC3339)
		Expect(page).To(ContainSubstring(`<dd id="freed">` + freed + ` (the completion plus the tool&#39;s keyRetention, 720h0m0s)</dd>`))

		By("saying so of a key nobody used")
		status, page = get(server.URL+"/actions/"+ns+"/order-never", "")
		Expect(status).To(Equal(http.StatusNotFound))
		Expect(page).To(ContainSubstring("ToolAction order-never not found in namespace " + ns + ", and no Tombstone keeps that key."))

		By("refusing a filter that names no namespace")
		status, page = get(server.URL+"/queue?namespace=Not_A_Namespace", "")
		Expect(status).To(Equal(http.StatusBadRequest))
		Expect(regexp.MustCompile(`id="error">namespace Not_A_Namespace: `).MatchString(page)).To(BeTrue(), page)
	})
})
