package webconsole_test

import (
	"bytes"
	"context"
	"encoding/json"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/chromedp/chromedp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/demo"
	"github.com/toolledger/toolledger/internal/testenv"
)

// person is a ServiceAccount of a tenant bound there to ClusterRoles, with
// a token for the console's audience and one for the API server.
type person struct {
	name         string
	consoleToken string
	kube         client.Client
}

func newPerson(ns, name string, roles ...string) person {
	GinkgoHelper()
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	Expect(k8s.Create(ctx, sa)).To(Succeed())
	for _, role := range roles {
		Expect(k8s.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-" + role},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}},
		})).To(Succeed())
	}
	asPerson := rest.AnonymousClientConfig(cfg)
	asPerson.BearerToken = token(sa, nil)
	kube, err := client.New(asPerson, client.Options{Scheme: k8s.Scheme()})
	Expect(err).NotTo(HaveOccurred())
	return person{name: "system:serviceaccount:" + ns + ":" + name, consoleToken: token(sa, []string{audience}), kube: kube}
}

// token requests a token of sa for audiences (the API server's when nil).
func token(sa *corev1.ServiceAccount, audiences []string) string {
	GinkgoHelper()
	expiry := int64(3600)
	request := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{Audiences: audiences, ExpirationSeconds: &expiry}}
	Expect(k8s.SubResource("token").Create(context.Background(), sa, request)).To(Succeed())
	return request.Status.Token
}

// tenantWithIdentity is a new tenant whose ToolActions, ToolApprovals and
// ToolResolutions the API server stamps with their creator.
func tenantWithIdentity() string {
	GinkgoHelper()
	ns := env.NewTenant()
	remove, err := testenv.InstallIdentityPolicy(context.Background(), cfg, k8s, ns, "console-suite")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(remove)
	return ns
}

// request creates the ToolAction key of tool as p, so that the API server
// stamps p as its requester.
func (p person) request(ns, key, tool string, amount int, customer string) {
	GinkgoHelper()
	Expect(p.kube.Create(context.Background(), charge(ns, key, tool, amount, customer))).To(Succeed())
}

// charge is the ToolAction key of a charge tool, in euros.
func charge(ns, key, tool string, amount int, customer string) *v1alpha1.ToolAction {
	action := &v1alpha1.ToolAction{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key}}
	action.Spec.ToolRef = v1alpha1.ToolReference{Name: tool}
	action.Spec.Parameters = map[string]apiextensionsv1.JSON{
		"amount": {Raw: []byte(strconv.Itoa(amount))}, "currency": {Raw: []byte(`"EUR"`)}, "customer": {Raw: []byte(strconv.Quote(customer))},
	}
	return action
}

// signIn signs tab in as p through the sign-in form.
func signIn(tab context.Context, p person) {
	GinkgoHelper()
	Expect(chromedp.Do(tab,
		chromedp.Navigate(consoleURL+"/queue"),
		chromedp.WaitVisible(chromedp.ID("token")), // not signed in: sent to the form
		chromedp.SetValue(chromedp.ID("token"), p.consoleToken),
		chromedp.Click(chromedp.ID("sign-in")),
		chromedp.WaitVisible(chromedp.ID("user")),
	)).To(Succeed())
	Expect(textOf(tab, "#user")).To(Equal(p.name))
}

// openLive opens a live page and waits until it has read the ledger once
// its event stream is open (body[data-synced]), so that it is not replaced
// under the spec's hands.
func openLive(tab context.Context, target string, wait chromedp.Action[chromedp.Void]) {
	GinkgoHelper()
	Expect(chromedp.Do(tab, chromedp.Navigate(target), wait, chromedp.WaitVisible(chromedp.CSS("body[data-synced]")))).To(Succeed())
}

// textOf reads the text of the element selector matches, waiting for it.
// It reads in one evaluation: a live page may swap the element between a
// query and a later read, and chromedp.Text then reads the detached node's
// text as "" without an error.
func textOf(tab context.Context, selector string) string {
	GinkgoHelper()
	quoted, err := json.Marshal(selector)
	Expect(err).NotTo(HaveOccurred())
	read := `(() => { const el = document.querySelector(` + string(quoted) + `); if (!el) { throw new Error("no element matches"); } return el.innerText; })()`
	var text string
	Eventually(func() (err error) {
		text, err = chromedp.Run(tab, chromedp.Evaluate[string](read))
		return err
	}).Should(Succeed())
	return text
}

// count counts the elements selector matches now, without waiting.
func count(tab context.Context, selector string) int {
	GinkgoHelper()
	var n int
	Eventually(func() error {
		nodes, err := chromedp.Run(tab, chromedp.Nodes(chromedp.CSSAll(selector), chromedp.AtLeast(0)))
		n = len(nodes)
		return err
	}).Should(Succeed())
	return n
}

func screenshot(tab context.Context, name string) {
	GinkgoHelper()
	shot, err := chromedp.Run(tab, chromedp.FullScreenshot(100))
	Expect(err).NotTo(HaveOccurred())
	img, err := png.Decode(bytes.NewReader(shot))
	Expect(err).NotTo(HaveOccurred())
	Expect(img.Bounds().Dx()).To(BeNumerically(">=", 1000))
	Expect(os.WriteFile(filepath.Join(screenshotDir(), name), shot, 0o644)).To(Succeed())
}

func approvalsOf(ns, key string) []v1alpha1.ToolApproval {
	GinkgoHelper()
	var list v1alpha1.ToolApprovalList
	Expect(k8s.List(context.Background(), &list, client.InNamespace(ns))).To(Succeed())
	var out []v1alpha1.ToolApproval
	for _, a := range list.Items {
		if a.Spec.ActionName == key {
			out = append(out, a)
		}
	}
	return out
}

const paySchema = `{"type":"object","required":["amount","currency","customer"],"properties":{"amount":{"type":"integer","minimum":1},"currency":{"type":"string","pattern":"^[A-Z]{3}$"},"customer":{"type":"string"}}}`

var _ = Describe("The web console in a browser", func() {
	It("lets an approver approve a waiting action from the queue: one effect, and the page shows Succeeded with the approver", func() {
		ns := tenantWithIdentity()
		env.CreateTool(ns, "refund", testenv.WithParametersSchema(paySchema), testenv.WithApprovalRequired(),
			testenv.WithConsequentialFields("/amount", "/customer"))
		requester := newPerson(ns, "agent", "toolledger-agent", "toolledger-viewer")
		approver := newPerson(ns, "approver", "toolledger-approver", "toolledger-viewer")
		requester.request(ns, "refund-1042", "refund", 4200, "c-1042")
		requester.request(ns, "refund-1043", "refund", 990, "c-1043")
		waiting := env.WaitForPhase(ns, "refund-1042", v1alpha1.PhaseAwaitingApproval)
		env.WaitForPhase(ns, "refund-1043", v1alpha1.PhaseAwaitingApproval)

		tab := newUserBrowser()
		signIn(tab, approver)
		By("opening the queue: both waiting actions, oldest first")
		openLive(tab, consoleURL+"/queue?namespace="+ns, chromedp.WaitVisible(chromedp.CSS(`tr[data-key="refund-1043"]`)))
		Expect(textOf(tab, `tr[data-key="refund-1042"]`)).To(ContainSubstring("AwaitingApproval"))
		screenshot(tab, "console-queue.png")

		By("opening the waiting action: the digest, and every parameter sent, marked where it enters the digest")
		Expect(chromedp.Do(tab, chromedp.Click(chromedp.CSS(`tr[data-key="refund-1042"] a`)), chromedp.WaitVisible(chromedp.ID("approve")),
			chromedp.WaitVisible(chromedp.CSS("body[data-synced]")))).To(Succeed())
		Expect(textOf(tab, "#digest")).To(Equal(waiting.Status.RequestDigest))
		Expect(textOf(tab, "#parameters")).To(And(ContainSubstring("/amount"), ContainSubstring("4200"), ContainSubstring(`"c-1042"`)))
		Expect(count(tab, `#parameters tr[data-in-digest="true"]`)).To(Equal(2), "/amount and /customer enter the digest")
		Expect(textOf(tab, `#parameters tr[data-in-digest="false"]`)).To(MatchRegexp(`^/currency\s+"EUR"\s+not in digest$`),
			"/currency is sent, though the tool leaves it out of the digest")
		Expect(textOf(tab, "#requested-by")).To(ContainSubstring(requester.name + " verified"))
		Expect(downstream.Requests(ns + "/refund-1042")).To(Equal(0))

		By("approving it with a reason")
		Expect(chromedp.Do(tab,
			chromedp.SetValue(chromedp.ID("decide-reason"), "refund agreed with the customer"),
			chromedp.Click(chromedp.ID("approve")),
			chromedp.WaitVisible(chromedp.ID("notice")),
		)).To(Succeed())
		// The page follows the watch until the action succeeds.
		Eventually(func() string { return textOf(tab, "#phase") }).Should(Equal("Succeeded"))
		Expect(textOf(tab, "#decided-by")).To(Equal(approver.name))
		Expect(textOf(tab, "#approval")).To(ContainSubstring("Approved by " + approver.name))
		screenshot(tab, "console-action.png")

		Expect(downstream.Effects(ns + "/refund-1042")).To(Equal(1))
		Expect(downstream.Requests(ns + "/refund-1042")).To(Equal(1))
		approvals := approvalsOf(ns, "refund-1042")
		Expect(approvals).To(HaveLen(1))
		Expect(approvals[0].Spec.RequestDigest).To(Equal(waiting.Status.RequestDigest))
		Expect(approvals[0].Spec.ActionUID).To(Equal(waiting.UID))
		Expect(approvals[0].Spec.Reason).To(Equal("refund agreed with the customer"))
		Expect(approvals[0].Annotations).To(HaveKeyWithValue(v1alpha1.DecidedByAnnotation, approver.name))
		Expect(env.Get(ns, "refund-1043").Status.Phase).To(Equal(v1alpha1.PhaseAwaitingApproval), "the other action still waits")
	})

	It("shows the requester no approve button, and refuses a forged POST", func() {
		ns := tenantWithIdentity()
		env.CreateTool(ns, "refund", testenv.WithParametersSchema(paySchema), testenv.WithApprovalRequired())
		requester := newPerson(ns, "agent", "toolledger-agent", "toolledger-viewer")
		requester.request(ns, "refund-2001", "refund", 5000, "c-2001")
		waiting := env.WaitForPhase(ns, "refund-2001", v1alpha1.PhaseAwaitingApproval)

		tab := newUserBrowser()
		signIn(tab, requester)
		actionURL := consoleURL + "/actions/" + ns + "/refund-2001"
		openLive(tab, actionURL, chromedp.WaitVisible(chromedp.ID("phase")))
		Expect(textOf(tab, "#phase")).To(Equal("AwaitingApproval"))
		Expect(count(tab, "#approve")).To(Equal(0), "no approve button for a user the API server would refuse")
		Expect(count(tab, "#deny")).To(Equal(0))
		Expect(count(tab, "form[action$='/decide']")).To(Equal(0))

		decide := consoleURL + "/actions/" + ns + "/refund-2001/decide"
		form := url.Values{"decision": {"Approved"}, "digest": {waiting.Status.RequestDigest}, "reason": {"forged"}}
		By("a POST without the form's token is refused before anything is asked of the API server")
		status, body := post(decide, requester.consoleToken, "", form)
		Expect(status).To(Equal(http.StatusForbidden))
		Expect(body).To(ContainSubstring("The form&#39;s token is missing, expired or not yours"))

		By("a POST from another site is refused by its Origin")
		status, _ = post(decide, requester.consoleToken, "http://attacker.example", form)
		Expect(status).To(Equal(http.StatusForbidden))

		By("a POST with the requester's own valid token is refused by the API server")
		signOutToken, err := chromedp.Run(tab, chromedp.Value(chromedp.CSS(`form[action="/sign-out"] input[name="csrf"]`)))
		Expect(err).NotTo(HaveOccurred())
		form.Set("csrf", signOutToken)
		status, body = post(decide, requester.consoleToken, "", form)
		Expect(status).To(Equal(http.StatusForbidden))
		Expect(body).To(ContainSubstring("cannot create a ToolApproval for ToolAction &#34;refund-2001&#34;"))
		Expect(body).To(ContainSubstring("is forbidden"))

		Expect(approvalsOf(ns, "refund-2001")).To(BeEmpty())
		Expect(env.Get(ns, "refund-2001").Status.Phase).To(Equal(v1alpha1.PhaseAwaitingApproval))
		Expect(downstream.Requests(ns + "/refund-2001")).To(Equal(0))
	})

	It("resolves an escalated action from its page, and the timeline shows the resolution", func() {
		ns := tenantWithIdentity()
		env.CreateTool(ns, "transfer", testenv.WithClass(v1alpha1.NonRepeatable), testenv.WithTimeout(time.Second), testenv.WithKeyLookup(),
			testenv.WithBackoff(200*time.Millisecond, time.Second))
		requester := newPerson(ns, "agent", "toolledger-agent", "toolledger-viewer")
		resolver := newPerson(ns, "oncall", "toolledger-resolver", "toolledger-viewer")
		downstream.InjectFault(demo.Fault{Mode: demo.FaultDropAfterCommit, Count: 1})
		requester.request(ns, "transfer-77", "transfer", 12000, "c-77")
		env.WaitForPhase(ns, "transfer-77", v1alpha1.PhaseEscalated)
		charged, ok := downstream.Charge(ns + "/transfer-77")
		Expect(ok).To(BeTrue(), "the charge happened; only its answer was lost")

		tab := newUserBrowser()
		signIn(tab, resolver)
		openLive(tab, consoleURL+"/queue?namespace="+ns+"&phase=Escalated", chromedp.WaitVisible(chromedp.CSS(`tr[data-key="transfer-77"]`)))
		Expect(chromedp.Do(tab, chromedp.Click(chromedp.CSS(`tr[data-key="transfer-77"] a`)), chromedp.WaitVisible(chromedp.ID("resolve-submit")),
			chromedp.WaitVisible(chromedp.CSS("body[data-synced]")))).To(Succeed())
		Expect(count(tab, "#approve")).To(Equal(0))

		By("a Succeeded outcome without a reference is refused with the reason, and nothing is created")
		Expect(chromedp.Do(tab,
			chromedp.SetValue(chromedp.ID("outcome"), "Succeeded"),
			chromedp.SetValue(chromedp.ID("resolve-reason"), "found it"),
			chromedp.Click(chromedp.ID("resolve-submit")),
			chromedp.WaitVisible(chromedp.ID("error")),
		)).To(Succeed())
		Expect(textOf(tab, "#error")).To(ContainSubstring("a Succeeded outcome needs the external reference"))

		By("resolving it as Succeeded with the provider's reference")
		Expect(chromedp.Do(tab,
			chromedp.SetValue(chromedp.ID("outcome"), "Succeeded"),
			chromedp.SetValue(chromedp.ID("external-ref-input"), charged.ID),
			chromedp.SetValue(chromedp.ID("resolve-reason"), "charge found in the provider's dashboard"),
			chromedp.Click(chromedp.ID("resolve-submit")),
			chromedp.WaitVisible(chromedp.ID("notice")),
		)).To(Succeed())
		Eventually(func() string { return textOf(tab, "#phase") }).Should(Equal("Succeeded"))
		timeline := textOf(tab, "#timeline")
		Expect(timeline).To(MatchRegexp(`Escalated → Succeeded\s+Resolved`))
		Expect(timeline).To(ContainSubstring("toolresolution/transfer-77-resolution-"))
		Expect(textOf(tab, "#external-ref")).To(ContainSubstring(charged.ID))
		Expect(textOf(tab, "#records")).To(And(ContainSubstring(resolver.name), ContainSubstring("charge found in the provider's dashboard")))
		Expect(downstream.Effects(ns + "/transfer-77")).To(Equal(1))
		Expect(downstream.Requests(ns+"/transfer-77")).To(Equal(1), "resolved, never sent again")
	})

	It("shows a downstream's markup as text, under a strict Content-Security-Policy", func() {
		ns := tenantWithIdentity()
		const markup = `<script>document.title="owned"</script><img src=x onerror=alert(1)>`
		hostile := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, markup)
		}))
		DeferCleanup(hostile.Close)
		tool := testenv.NewTool(ns, "notify", hostile.URL)
		tool.Spec.HTTP.Response.StoreErrorBody = true
		Expect(k8s.Create(context.Background(), tool)).To(Succeed())
		requester := newPerson(ns, "agent", "toolledger-agent", "toolledger-viewer")
		requester.request(ns, "notify-1", "notify", 1, "c-1")
		failed := env.WaitForPhase(ns, "notify-1", v1alpha1.PhaseFailed)
		Expect(failed.Status.Error.Message).To(ContainSubstring("<script>"))

		tab := newUserBrowser()
		signIn(tab, requester)
		openLive(tab, consoleURL+"/actions/"+ns+"/notify-1", chromedp.WaitVisible(chromedp.ID("action-error")))
		title, err := chromedp.Run(tab, chromedp.Title())
		Expect(err).NotTo(HaveOccurred())
		Expect(textOf(tab, "#action-error")).To(ContainSubstring(`<script>document.title="owned"</script>`))
		Expect(count(tab, "#action-error script")).To(Equal(0))
		Expect(count(tab, "#action-error img")).To(Equal(0))
		Expect(title).To(Equal("notify-1 · toolledger"))

		status, header, page := send(newRequest(http.MethodGet, consoleURL+"/actions/"+ns+"/notify-1", requester.consoleToken, nil))
		Expect(status).To(Equal(http.StatusOK))
		Expect(header.Get("Content-Security-Policy")).To(Equal("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
			"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"))
		Expect(header.Get("X-Content-Type-Options")).To(Equal("nosniff"))
		Expect(page).NotTo(ContainSubstring("<script>document"))
		Expect(page).To(ContainSubstring("&lt;script&gt;document.title="))
		Expect(page).NotTo(ContainSubstring(requester.consoleToken), "no token in a page")
	})
})

var _ = Describe("The web console's sign-in", func() {
	It("refuses a token for another audience and requests without a token", func() {
		ns := env.NewTenant()
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "someone"}}
		Expect(k8s.Create(context.Background(), sa)).To(Succeed())

		By("a page sends the browser to sign in; the event stream refuses")
		status, header, _ := send(newRequest(http.MethodGet, consoleURL+"/queue", "", nil))
		Expect(status).To(Equal(http.StatusSeeOther))
		Expect(header.Get("Location")).To(Equal("/sign-in"))
		status, _, _ = send(newRequest(http.MethodGet, consoleURL+"/events", "", nil))
		Expect(status).To(Equal(http.StatusUnauthorized))

		By("a token for the API server's audience is not one for the console")
		status, _, page := send(newRequest(http.MethodGet, consoleURL+"/queue", token(sa, nil), nil))
		Expect(status).To(Equal(http.StatusUnauthorized))
		Expect(page).To(ContainSubstring("The token was not accepted"))

		By("a sign-in cookie whose token no longer works is cleared, and the browser sent to sign in")
		req := newRequest(http.MethodGet, consoleURL+"/queue", "", nil)
		req.AddCookie(&http.Cookie{Name: "toolledger_token", Value: token(sa, nil)})
		status, header, _ = send(req)
		Expect(status).To(Equal(http.StatusSeeOther))
		Expect(header.Get("Location")).To(Equal("/sign-in"))
		Expect(header.Get("Set-Cookie")).To(HavePrefix("toolledger_token=; Path=/; Max-Age=0; HttpOnly; Secure; SameSite=Lax"))

		By("an empty sign-in form asks for a token, and sends no review")
		_, _, form := send(newRequest(http.MethodGet, consoleURL+"/sign-in", "", nil))
		csrf := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(form)
		Expect(csrf).To(HaveLen(2))
		status, page = post(consoleURL+"/sign-in", "", "", url.Values{"csrf": {csrf[1]}, "token": {"  "}})
		Expect(status).To(Equal(http.StatusUnauthorized))
		Expect(page).To(ContainSubstring(`id="error">Paste a token issued for the audience toolledger-console.</p>`))
		status, _ = post(consoleURL+"/sign-in", "", "", url.Values{"token": {"x"}})
		Expect(status).To(Equal(http.StatusForbidden), "a sign-in without the form's token")

		By("signing out needs the form's token while the token still works")
		person := newPerson(ns, "viewer", "toolledger-viewer")
		status, _ = post(consoleURL+"/sign-out", person.consoleToken, "", url.Values{"csrf": {"1.forged"}})
		Expect(status).To(Equal(http.StatusForbidden))
	})
})

// newRequest is a request with the bearer token, when set.
func newRequest(method, target, bearer string, body io.Reader) *http.Request {
	GinkgoHelper()
	req, err := http.NewRequestWithContext(context.Background(), method, target, body)
	Expect(err).NotTo(HaveOccurred())
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	return req
}

// send sends req, following no redirect, and reads the answer whole.
func send(req *http.Request) (status int, header http.Header, body string) {
	GinkgoHelper()
	noRedirects := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirects.Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	read, err := io.ReadAll(resp.Body)
	Expect(err).NotTo(HaveOccurred())
	return resp.StatusCode, resp.Header, string(read)
}

// post sends form as a browser would, from origin when set.
func post(target, bearer, origin string, form url.Values) (int, string) {
	GinkgoHelper()
	req := newRequest(http.MethodPost, target, bearer, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if origin != "" {
		req.Header.Set("Origin", origin)
		req.Header.Set("Sec-Fetch-Site", "cross-site")
	}
	status, _, body := send(req)
	return status, body
}
