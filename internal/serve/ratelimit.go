package serve

import (
	"flag"
	"math"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"golang.org/x/time/rate"

	"github.com/toolledger/toolledger/internal/identity"
)

// Defaults of RateLimit: a client may send DefaultBurst requests at once
// and DefaultRate per second after that; DefaultMaxClients are remembered.
const (
	DefaultRate       = 20
	DefaultBurst      = 40
	DefaultMaxClients = 4096
)

// RateLimit is a token bucket per client address (the request's remote
// IP, without the port; an IPv6 address's /64): a client over its rate is answered 429 Too Many
// Requests with a Retry-After, before the request is authenticated, so
// that no client can fill the API server's queue with token reviews or
// crowd out another client. Behind a proxy every client shares the
// proxy's address: give the proxy's own limit then. The buckets of at most
// maxClients addresses are kept; the least recently seen is dropped first
// (a dropped client starts again with a full bucket).
type RateLimit struct {
	perSecond rate.Limit
	burst     int
	now       func() time.Time
	clients   *identity.Cache[*rate.Limiter]
}

// NewRateLimit returns a limit of perSecond requests per second and burst
// at once per client address; a perSecond of zero or less limits nothing.
func NewRateLimit(perSecond float64, burst, maxClients int) *RateLimit {
	return &RateLimit{perSecond: rate.Limit(perSecond), burst: max(burst, 1), now: time.Now, clients: identity.NewCache[*rate.Limiter](max(maxClients, 1))}
}

// Handler limits next.
func (l *RateLimit) Handler(next http.Handler) http.Handler {
	if l == nil || l.perSecond <= 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if wait, ok := l.allow(clientAddress(r.RemoteAddr)); !ok {
			w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
			http.Error(w, "too many requests from this address: retry after the time Retry-After gives", http.StatusTooManyRequests)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// allow takes a token of client's bucket, or says how long until one is
// due.
func (l *RateLimit) allow(client string) (time.Duration, bool) {
	limiter, ok := l.clients.Get(client)
	if !ok {
		limiter = l.clients.Add(client, rate.NewLimiter(l.perSecond, l.burst))
	}
	now := l.now()
	reservation := limiter.ReserveN(now, 1)
	wait := reservation.DelayFrom(now)
	if wait == 0 {
		return 0, true
	}
	reservation.CancelAt(now)
	return max(wait, time.Second), false
}

// clientAddress is the client a bucket is for: the remote address's IPv4
// address, or its IPv6 /64, the block one host (or one customer of a
// provider) is usually given, so that walking through it earns no fresh
// buckets.
func clientAddress(remoteAddr string) string {
	addrPort, err := netip.ParseAddrPort(remoteAddr)
	if err != nil {
		return remoteAddr
	}
	addr := addrPort.Addr().Unmap()
	if addr.Is4() {
		return addr.String()
	}
	prefix, err := addr.WithZone("").Prefix(64)
	if err != nil {
		return addr.String()
	}
	return prefix.String()
}

// RateLimitFlags registers --rate-limit and --rate-limit-burst on fs; the
// function returned makes the limit they set, once fs is parsed.
func RateLimitFlags(fs *flag.FlagSet) func() *RateLimit {
	perSecond := fs.Float64("rate-limit", DefaultRate, "Requests per second each client address may send (a token bucket per remote IP, or IPv6 /64; over it, 429 with Retry-After, before the token is reviewed). 0 limits nothing; behind a proxy every client shares its address.")
	burst := fs.Int("rate-limit-burst", DefaultBurst, "Requests each client address may send at once, above --rate-limit.")
	return func() *RateLimit { return NewRateLimit(*perSecond, *burst, DefaultMaxClients) }
}
