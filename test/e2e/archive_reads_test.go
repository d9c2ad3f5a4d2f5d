//go:build e2e && linux

package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/archive"
	"github.com/toolledger/toolledger/internal/testenv"
)

// The archive's reads against the manager's memory: a tenant's history of
// large records, read through the API server as people read it.
const (
	// bulkyRecords of bulkySize each, as the review measured them.
	bulkyRecords = 50
	bulkySize    = 1 << 20
	// readPeakBudget is how much the peak resident memory of the manager,
	// and of the console, may grow while they serve the reads: the chart
	// limits the manager to 256 MiB.
	readPeakBudget = 64 << 20
)

// archiveReadMemory keeps 50 records of a 1 MiB document in the archive,
// then lists them with kubectl, three times in pages (as kubectl asks) and
// three times whole (--chunk-size=0), and verifies their chain, all at
// once, and opens the console's
// History page of the tenant three times at once. The manager serving the
// archive API and the console must each stay within readPeakBudget of
// their peak resident memory before the reads, and the manager must not
// restart.
func archiveReadMemory(s *suite, sc *run) error {
	if err := s.stopSteadyManagers(); err != nil {
		return err
	}
	db, err := s.startArchive(sc)
	if err != nil {
		return err
	}
	defer db.pool.Close()
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Minute)
	defer cancel()
	m, err := s.startArchiveAPIManager(ctx, db)
	if err != nil {
		return err
	}
	defer m.proc.stop(10 * time.Second)

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-" + sc.name + "-",
		Labels: map[string]string{"e2e.toolledger.dev/scenario": sc.name}}}
	if err := s.cluster.client.Create(ctx, ns); err != nil {
		return fmt.Errorf("cannot create the tenant: %w", err)
	}
	kept, err := keepBulky(ctx, db.dsn, ns)
	if err != nil {
		return err
	}
	console, err := s.startConsole(ns.Name)
	if err != nil {
		return err
	}
	defer console.proc.stop(5 * time.Second)
	// Each process once warm: a list and a search of an empty tenant.
	if _, err := s.kubectl(ctx, "get", "archivedtoolactions", "-n", "default"); err != nil {
		return fmt.Errorf("kubectl get archivedtoolactions: %w", err)
	}
	if _, err := console.history(ctx, "default"); err != nil {
		return err
	}
	managerBefore, err := peakRSS(m.proc)
	if err != nil {
		return err
	}
	consoleBefore, err := peakRSS(console.proc)
	if err != nil {
		return err
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		errs = append(errs, err)
	}
	for _, chunk := range []string{"500", "500", "500", "0", "0", "0"} {
		wg.Go(func() {
			out, err := s.kubectl(ctx, "get", "archivedtoolactions", "-n", ns.Name, "--chunk-size="+chunk, "--no-headers")
			if err != nil {
				fail(fmt.Errorf("kubectl get archivedtoolactions --chunk-size=%s: %w: %s", chunk, err, tail(out)))
			} else if n := strings.Count(out, "\n"); n != kept {
				fail(fmt.Errorf("kubectl get archivedtoolactions --chunk-size=%s listed %d records, want %d", chunk, n, kept))
			}
		})
	}
	// Beside them, the tenant's chain verified, every record read again.
	wg.Go(func() {
		out, err := s.kubectl(ctx, "get", "archivechains", "ledger", "-n", ns.Name, "--no-headers")
		switch {
		case err != nil:
			fail(fmt.Errorf("kubectl get archivechains ledger: %w: %s", err, tail(out)))
		case !strings.HasPrefix(out, "ledger   true "):
			fail(fmt.Errorf("kubectl get archivechains ledger: the chain is not verified: %s", tail(out)))
		}
	})
	wg.Wait()
	for range 3 {
		wg.Go(func() {
			page, err := console.history(ctx, ns.Name)
			if err != nil {
				fail(err)
			} else if n := strings.Count(page, `<tr data-key="upload-`); n != kept {
				fail(fmt.Errorf("the console's History page lists %d records, want %d", n, kept))
			}
		})
	}
	wg.Wait()
	managerAfter, err := peakRSS(m.proc)
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("the manager serving the archive API did not survive the reads: %w", err))...)
	}
	consoleAfter, err := peakRSS(console.proc)
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("the console did not survive the reads: %w", err))...)
	}
	for _, p := range []struct {
		name          string
		before, after int64
	}{{"the manager", managerBefore, managerAfter}, {"the console", consoleBefore, consoleAfter}} {
		if p.after-p.before > readPeakBudget {
			errs = append(errs, fmt.Errorf("%s's peak resident memory grew by %s (%s → %s) while serving the reads, past the budget of %s",
				p.name, mibs(p.after-p.before), mibs(p.before), mibs(p.after), mibs(readPeakBudget)))
		}
	}
	sc.row.Notes = append(sc.row.Notes, fmt.Sprintf(
		"%d archived records of a %d MiB string parameter (and kubectl's last-applied copy of it), kept with archive.Store.Keep of archive.NewRecord; "+
			"3 paged and 3 unpaged kubectl lists and a verification of the chain at once, then 3 History pages of the console at once; peak RSS (VmHWM) of the manager %s → %s, of the console %s → %s (budget: +%s each)",
		kept, bulkySize>>20, mibs(managerBefore), mibs(managerAfter), mibs(consoleBefore), mibs(consoleAfter), mibs(readPeakBudget)))
	s.logf("%s: %s", sc.name, sc.row.Notes[len(sc.row.Notes)-1])
	return errors.Join(errs...)
}

// keepBulky keeps bulkyRecords large records in the tenant's archive, as
// the manager keeps a finished action.
func keepBulky(ctx context.Context, dsn string, namespace *corev1.Namespace) (int, error) {
	store, err := archive.Open(ctx, dsn)
	if err != nil {
		return 0, err
	}
	defer store.Close()
	for i := range bulkyRecords {
		a, err := testenv.BulkyAction(namespace.Name, fmt.Sprintf("upload-%03d", i), bulkySize, time.Now().Add(-time.Hour+time.Duration(i)*time.Second))
		if err != nil {
			return i, err
		}
		r, err := archive.NewRecord(a, namespace.UID, &v1alpha1.Tool{Spec: v1alpha1.ToolSpec{IdempotencyClass: v1alpha1.NonRepeatable}},
			v1alpha1.TombstoneCauseRecordRetention, "", time.Now())
		if err == nil {
			_, err = store.Keep(ctx, r, archive.Link{})
		}
		if err != nil {
			return i, err
		}
	}
	return bulkyRecords, nil
}

// startArchiveAPIManager starts a manager on db that serves the archive
// API, and registers it with the API server.
func (s *suite) startArchiveAPIManager(ctx context.Context, db *archiveDB) (*manager, error) {
	api, err := testenv.NewArchiveAPI(filepath.Join(s.dir, "archive-api"))
	if err != nil {
		return nil, err
	}
	m, err := s.procs.startManager(s.cluster.kubeconfig, s.nextManagerID("archive-api"), "--archive-dsn="+db.dsn,
		"--archive-record-retention="+archiveRecordRetention.String(), "--archive-api-bind-address=127.0.0.1:0", "--archive-api-cert-dir="+api.CertDir)
	if err != nil {
		return nil, err
	}
	if err := m.waitReady(ctx); err != nil {
		return nil, err
	}
	addr, err := m.listening(ctx, m.archiveAPIAddr)
	if err != nil {
		return m, err
	}
	port, err := testenv.PortOf(addr)
	if err != nil {
		return m, err
	}
	registering, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := api.Register(registering, s.cluster.client, port); err != nil {
		return m, err
	}
	if err := testenv.WaitAvailable(registering, s.cluster.client); err != nil {
		return m, fmt.Errorf("the archive API is not available: %w", err)
	}
	return m, nil
}

// consoleProc is a bin/toolledger-console process in the local mode, as
// the e2e admin.
type consoleProc struct {
	proc *process
	url  string
}

var consoleURL = regexp.MustCompile(`"url":"(http://[^"]+)"`)

func (s *suite) startConsole(namespace string) (*consoleProc, error) {
	path, err := binary("toolledger-console")
	if err != nil {
		return nil, err
	}
	found := make(chan string, 1)
	p, err := s.procs.start("console", path, []string{"--kubeconfig=" + s.cluster.kubeconfig, "--listen=127.0.0.1:0", "--namespace=" + namespace},
		func(line string) {
			if m := consoleURL.FindStringSubmatch(line); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		})
	if err != nil {
		return nil, err
	}
	select {
	case url := <-found:
		return &consoleProc{proc: p, url: url}, nil
	case <-p.done:
		return nil, fmt.Errorf("the console exited: %w\n%s", p.err, p.tail(2000))
	case <-time.After(30 * time.Second):
		p.kill()
		return nil, errors.New("the console did not say where it serves within 30s")
	}
}

// history is the console's History page of namespace.
func (c *consoleProc) history(ctx context.Context, namespace string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url+"history?namespace="+namespace, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("the console's History page: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("the console's History page answered %d: %s", resp.StatusCode, tail(string(body)))
	}
	return string(body), err
}

// peakRSS is the process's peak resident memory (VmHWM), in bytes; an
// error once it has exited.
func peakRSS(p *process) (int64, error) {
	if p.exited() {
		return 0, fmt.Errorf("%s has exited: %w\n%s", p.name, p.err, p.tail(3000))
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if value, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kib, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
			return kib << 10, err
		}
	}
	return 0, fmt.Errorf("no VmHWM in the status of %s", p.name)
}

func mibs(n int64) string { return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20)) }

// tail is the end of a long output, for an error.
func tail(out string) string {
	if len(out) > 2000 {
		return "…" + out[len(out)-2000:]
	}
	return out
}
