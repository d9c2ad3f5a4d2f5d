package integration

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/testenv"
)

var _ = Describe("The dispatcher", func() {
	ctx := context.Background()
	var ns string
	BeforeEach(func() {
		ns = env.NewTenant()
		createTool(ns)
	})

	It("dispatches a fast tool's action within seconds while 16 actions of a hung tool are in flight", func() {
		hung := startCountingDownstream(0)
		Expect(k8s.Create(ctx, testenv.NewTool(ns, "hung", hung.url, testenv.WithTimeout(5*time.Minute), testenv.WithLimits(16, 100)))).To(Succeed())
		// 8 workers, the default: 16 calls in flight prove that none holds one.
		startManager("dispatch-hung", nil)

		for i := range 16 {
			a := action(ns, fmt.Sprintf("hung-%02d", i), i+1)
			a.Spec.ToolRef.Name = "hung"
			Expect(k8s.Create(ctx, a)).To(Succeed())
		}
		Eventually(hung.inFlight).Should(Equal(16))

		began := time.Now()
		Expect(k8s.Create(ctx, action(ns, "fast", 100))).To(Succeed())
		Eventually(func() v1alpha1.Phase { return env.Get(ns, "fast").Status.Phase }, 10*time.Second).Should(Equal(v1alpha1.PhaseSucceeded))
		AddReportEntry("fast action's create→Succeeded with 16 hung calls in flight", time.Since(began).String())

		Expect(downstream.Requests(ns + "/fast")).To(Equal(1))
		Expect(hung.inFlight()).To(Equal(16), "the hung calls are still held")
		Expect(hung.total()).To(Equal(16))
		for i := range 16 {
			Expect(env.Get(ns, fmt.Sprintf("hung-%02d", i)).Status.Phase).To(Equal(v1alpha1.PhaseExecuting))
		}

		hung.release()
		for i := range 16 {
			name := fmt.Sprintf("hung-%02d", i)
			Eventually(func() v1alpha1.Phase { return env.Get(ns, name).Status.Phase }).Should(Equal(v1alpha1.PhaseSucceeded))
			Expect(hung.requests(ns + "/" + name)).To(Equal(1))
		}
	})

	It("never has more than a tool's maxInFlight calls at its downstream, under a burst of ten times as many actions", func() {
		const limit, actions = 3, 30
		slow := startCountingDownstream(200 * time.Millisecond)
		Expect(k8s.Create(ctx, testenv.NewTool(ns, "limited", slow.url, testenv.WithLimits(limit, 1000)))).To(Succeed())
		startManager("dispatch-limited", nil)

		var wg sync.WaitGroup
		for i := range actions {
			wg.Add(1)
			go func() {
				defer GinkgoRecover()
				defer wg.Done()
				a := action(ns, fmt.Sprintf("burst-%02d", i), i+1)
				a.Spec.ToolRef.Name = "limited"
				Expect(k8s.Create(ctx, a)).To(Succeed())
			}()
		}
		wg.Wait()
		for i := range actions {
			name := fmt.Sprintf("burst-%02d", i)
			Eventually(func() v1alpha1.Phase { return env.Get(ns, name).Status.Phase }).Should(Equal(v1alpha1.PhaseSucceeded))
			Expect(slow.requests(ns + "/" + name)).To(Equal(1))
		}
		Expect(slow.total()).To(Equal(actions))
		Expect(slow.most()).To(Equal(limit), "the most calls the downstream saw at once")
	})

	It("starts no more of a tool's calls a second than its requestsPerSecond, beyond one burst", func() {
		const burst, perSecond, actions = 2, 4, 12
		fast := startCountingDownstream(0)
		fast.release()
		Expect(k8s.Create(ctx, testenv.NewTool(ns, "paced", fast.url, testenv.WithLimits(burst, perSecond)))).To(Succeed())
		startManager("dispatch-paced", nil)

		for i := range actions {
			a := action(ns, fmt.Sprintf("paced-%02d", i), i+1)
			a.Spec.ToolRef.Name = "paced"
			Expect(k8s.Create(ctx, a)).To(Succeed())
		}
		for i := range actions {
			name := fmt.Sprintf("paced-%02d", i)
			Eventually(func() v1alpha1.Phase { return env.Get(ns, name).Status.Phase }).Should(Equal(v1alpha1.PhaseSucceeded))
		}
		starts := fast.starts()
		Expect(starts).To(HaveLen(actions))
		// After the first burst, one call per 1/perSecond at most: the span
		// can only be longer than this, never shorter, but for the time the
		// first call took to reach the downstream after its turn, which a
		// busy machine stretches (250 ms; unpaced, the 12 calls take a
		// tenth of the bound).
		span := starts[len(starts)-1].Sub(starts[0])
		least := time.Duration(float64(actions-burst)/perSecond*float64(time.Second)) - 250*time.Millisecond
		Expect(span).To(BeNumerically(">=", least), "%d calls within %s", actions, span)
	})
})

// countingDownstream answers every request with 200 and an id, after hold
// (when set) or once released, and counts what it sees: the calls in
// flight, the most at once, the requests per idempotency key and when each
// began.
type countingDownstream struct {
	url      string
	hold     time.Duration
	released chan struct{}
	once     sync.Once

	mu       sync.Mutex
	current  int
	peak     int
	perKey   map[string]int
	startsAt []time.Time
}

func startCountingDownstream(hold time.Duration) *countingDownstream {
	GinkgoHelper()
	d := &countingDownstream{hold: hold, released: make(chan struct{}), perKey: map[string]int{}}
	server := httptest.NewServer(http.HandlerFunc(d.serve))
	d.url = server.URL
	// Release before Close: Close waits for the requests in flight.
	DeferCleanup(server.Close)
	DeferCleanup(d.release)
	return d
}

func (d *countingDownstream) serve(w http.ResponseWriter, r *http.Request) {
	// The key is sent as a structured-header string, quoted.
	key, err := strconv.Unquote(r.Header.Get("Idempotency-Key"))
	if err != nil {
		http.Error(w, "Idempotency-Key is not a quoted string", http.StatusBadRequest)
		return
	}
	d.mu.Lock()
	d.current++
	d.peak = max(d.peak, d.current)
	d.perKey[key]++
	d.startsAt = append(d.startsAt, time.Now())
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		d.current--
		d.mu.Unlock()
	}()
	var answer <-chan time.Time
	if d.hold > 0 {
		timer := time.NewTimer(d.hold)
		defer timer.Stop()
		answer = timer.C
	}
	select {
	case <-answer:
	case <-d.released:
	case <-r.Context().Done():
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = fmt.Fprintf(w, `{"id":"ch_%d"}`, time.Now().UnixNano())
}

func (d *countingDownstream) release() { d.once.Do(func() { close(d.released) }) }

func (d *countingDownstream) inFlight() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.current
}

func (d *countingDownstream) most() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.peak
}

func (d *countingDownstream) requests(key string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.perKey[key]
}

func (d *countingDownstream) total() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, c := range d.perKey {
		n += c
	}
	return n
}

func (d *countingDownstream) starts() []time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.startsAt)
}
