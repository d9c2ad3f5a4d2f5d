package integration

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/cmd/manager/app"
	"github.com/toolledger/toolledger/internal/testenv"
)

// A claim's lease and the send are measured on one clock, the executor's:
// a pause between the claim and the send (GC, a frozen container) that
// leaves less than the clock margin of the lease does not send the
// attempt, since another replica, whose clock may run ahead by that much,
// may already take the claim for lapsed and look the key up.
var _ = Describe("An attempt sent only within its claim's lease", func() {
	It("does not send an attempt claimed before a pause that ran into the lease's margin, and sends the next one", func() {
		ctx := context.Background()
		ns := env.NewTenant()
		clock := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
		const timeout, grace, margin = 2 * time.Second, 2 * time.Second, time.Second
		// The pause: once the claim of attempt 1 is written, the manager's
		// clock moves to half a second before the lease ends, inside the margin.
		pause := &pauseAfterClaim{clock: clock, name: "order-paused", by: timeout + grace - margin/2}
		cfg := testenv.AsManager(env.Config)
		cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { pause.next = rt; return pause }
		stop, err := testenv.StartManager(cfg, app.Options{ExecutorID: "paused", LeaseGrace: grace, LeaseMargin: margin, Clock: clock})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { _ = stop() })
		env.CreateTool(ns, "charge", testenv.WithTimeout(timeout), testenv.WithBackoff(time.Second, time.Second))

		Expect(k8s.Create(ctx, &v1alpha1.ToolAction{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "order-paused"},
			Spec: v1alpha1.ToolActionSpec{ToolRef: v1alpha1.ToolReference{Name: "charge"}, Parameters: map[string]apiextensionsv1.JSON{
				"amount": {Raw: []byte("12")}, "currency": {Raw: []byte(`"EUR"`)}, "customer": {Raw: []byte(`"cus_1"`)}}},
		})).To(Succeed())
		notSent := env.WaitForPhase(ns, "order-paused", v1alpha1.PhaseRetryScheduled)
		Expect(pause.paused()).To(BeTrue())
		Expect(notSent.Status.Error.Reason).To(Equal("LeaseSpentBeforeSend"))
		Expect(notSent.Status.Error.Message).To(ContainSubstring("less the 1s clock margin, before the request could be sent; it was not sent"))
		key := v1alpha1.IdempotencyKey(ns, "order-paused")
		Expect(downstream.Requests(key)).To(BeZero(), "attempt 1 was sent after its lease's margin")

		// The retry is due a second later, on the manager's clock.
		clock.Step(time.Second)
		done := env.WaitForPhase(ns, "order-paused", v1alpha1.PhaseSucceeded)
		Expect(done.Status.Attempts).To(Equal(int32(2)))
		Expect(downstream.Requests(key)).To(Equal(1))
		Expect(downstream.Effects(key)).To(Equal(1))
	})
})

// pauseAfterClaim steps clock by `by` once the claim of the action name is
// written: the manager then wakes from a pause between its claim and its send.
type pauseAfterClaim struct {
	next  http.RoundTripper
	clock *clocktesting.FakeClock
	name  string
	by    time.Duration
	once  sync.Once
	done  bool
	mu    sync.Mutex
}

func (p *pauseAfterClaim) RoundTrip(req *http.Request) (*http.Response, error) {
	claim := false
	if req.Method == http.MethodPut && strings.HasSuffix(req.URL.Path, "/toolactions/"+p.name+"/status") && req.Body != nil {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, err
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		claim = bytes.Contains(body, []byte(`"phase":"Executing"`))
	}
	resp, err := p.next.RoundTrip(req)
	if claim && err == nil && resp.StatusCode == http.StatusOK {
		p.once.Do(func() {
			p.clock.Step(p.by)
			p.mu.Lock()
			p.done = true
			p.mu.Unlock()
		})
	}
	return resp, err
}

func (p *pauseAfterClaim) paused() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}
