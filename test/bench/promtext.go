package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"k8s.io/client-go/kubernetes"
)

// sample is one line of the Prometheus text exposition format.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// metrics is a scrape: every sample, in the order they came.
type metrics []sample

// parseMetrics reads the Prometheus text format (version 0.0.4): comments
// are skipped, each other line is `name{label="value",...} value [timestamp]`.
// It is small on purpose: the harness needs counters and gauges only.
func parseMetrics(r io.Reader) (metrics, error) {
	var out metrics
	scanner := bufio.NewScanner(r)
	scanner.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for scanner.Scan() {
		line := strings.TrimSpace(scanner.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			return nil, fmt.Errorf("cannot parse metric line %q: %w", line, err)
		}
		out = append(out, s)
	}
	return out, scanner.Err()
}

func parseSample(line string) (sample, error) {
	s := sample{labels: map[string]string{}}
	rest := line
	if i := strings.IndexAny(rest, "{ "); i >= 0 && rest[i] == '{' {
		s.name = rest[:i]
		rest = rest[i+1:]
		for {
			rest = strings.TrimLeft(rest, ", ")
			if strings.HasPrefix(rest, "}") {
				rest = rest[1:]
				break
			}
			eq := strings.IndexByte(rest, '=')
			if eq < 0 || len(rest) < eq+2 || rest[eq+1] != '"' {
				return s, fmt.Errorf("malformed labels")
			}
			key := rest[:eq]
			rest = rest[eq+2:]
			var value strings.Builder
			closed := false
			for i := 0; i < len(rest); i++ {
				c := rest[i]
				if c == '\\' && i+1 < len(rest) {
					i++
					switch rest[i] {
					case 'n':
						value.WriteByte('\n')
					default:
						value.WriteByte(rest[i])
					}
					continue
				}
				if c == '"' {
					rest = rest[i+1:]
					closed = true
					break
				}
				value.WriteByte(c)
			}
			if !closed {
				return s, fmt.Errorf("unterminated label value")
			}
			s.labels[key] = value.String()
		}
	} else if i >= 0 {
		s.name = rest[:i]
		rest = rest[i:]
	} else {
		return s, fmt.Errorf("no value")
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return s, fmt.Errorf("no value")
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return s, err
	}
	s.value = v
	return s, nil
}

// sum adds the values of the samples named name whose labels match every
// pair of match.
func (m metrics) sum(name string, match map[string]string) float64 {
	total := 0.0
	for _, s := range m {
		if s.name == name && matches(s.labels, match) {
			total += s.value
		}
	}
	return total
}

// since is how much the sum of the samples named name that match grew
// from the scrape before to m.
func (m metrics) since(before metrics, name string, match map[string]string) float64 {
	return m.sum(name, match) - before.sum(name, match)
}

// has reports whether any sample is named name.
func (m metrics) has(name string) bool {
	for _, s := range m {
		if s.name == name {
			return true
		}
	}
	return false
}

func matches(labels, match map[string]string) bool {
	for k, v := range match {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// requestKey identifies one series of apiserver_request_total.
type requestKey struct {
	Verb, Group, Resource, Subresource, Code string
}

// requestCounts is apiserver_request_total by verb, resource and code.
type requestCounts map[requestKey]float64

func (m metrics) requests() requestCounts {
	out := requestCounts{}
	for _, s := range m {
		if s.name != "apiserver_request_total" {
			continue
		}
		k := requestKey{s.labels["verb"], s.labels["group"], s.labels["resource"], s.labels["subresource"], s.labels["code"]}
		out[k] += s.value
	}
	return out
}

// minus is the increase of each series since before.
func (c requestCounts) minus(before requestCounts) requestCounts {
	out := requestCounts{}
	for k, v := range c {
		if d := v - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

// sorted lists the series by group, resource, subresource, verb and code.
func (c requestCounts) sorted() []requestKey {
	keys := slices.Collect(maps.Keys(c))
	slices.SortFunc(keys, func(a, b requestKey) int {
		return strings.Compare(a.Group+"/"+a.Resource+"/"+a.Subresource+"/"+a.Verb+"/"+a.Code,
			b.Group+"/"+b.Resource+"/"+b.Subresource+"/"+b.Verb+"/"+b.Code)
	})
	return keys
}

// mutating reports whether the verb writes.
func mutating(verb string) bool {
	switch verb {
	case "CREATE", "UPDATE", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION", "POST", "PUT":
		return true
	}
	return false
}

func successful(code string) bool { return strings.HasPrefix(code, "2") }

// etcdWrites is etcd_requests_total for operations that write toolactions.
func (m metrics) etcdWrites() float64 {
	total := 0.0
	for _, s := range m {
		if s.name != "etcd_requests_total" || s.labels["resource"] != "toolactions" {
			continue
		}
		switch s.labels["operation"] {
		case "create", "update", "delete", "txn", "put":
			total += s.value
		}
	}
	return total
}

// scrapeAPIServer reads the kube-apiserver's own /metrics as an admin.
func scrapeAPIServer(ctx context.Context, cs kubernetes.Interface) (metrics, error) {
	body, err := cs.Discovery().RESTClient().Get().AbsPath("/metrics").
		SetHeader("Accept", "text/plain;version=0.0.4").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("cannot scrape the kube-apiserver's /metrics: %w", err)
	}
	return parseMetrics(strings.NewReader(string(body)))
}

// scrapeHTTP reads a plain-HTTP Prometheus endpoint, such as the manager's.
func scrapeHTTP(ctx context.Context, url string) (metrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return parseMetrics(resp.Body)
}
