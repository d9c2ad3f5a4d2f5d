package specenv

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"github.com/toolledger/toolledger/internal/testenv"
)

// StripeMock runs Stripe's own mock server, built into bin/ by the test
// command, on 127.0.0.1 until the spec ends, and returns its URL. It
// validates every request against Stripe's OpenAPI description: a body it
// cannot read is a 400.
func StripeMock() string {
	ginkgo.GinkgoHelper()
	path := filepath.Join(testenv.BinDir(), "stripe-mock")
	_, err := os.Stat(path)
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "bin/stripe-mock is built by `make test` (make stripe-mock)")

	// It listens where the kernel chooses and prints where: a port picked
	// free beforehand could be taken by another program before it listens.
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, path, "-http-addr", "127.0.0.1:0", "-https-addr", "127.0.0.1:0")
	out, err := cmd.StdoutPipe()
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	cmd.Stderr = ginkgo.GinkgoWriter
	gomega.Expect(cmd.Start()).To(gomega.Succeed())
	ginkgo.DeferCleanup(func() {
		cancel()
		_ = cmd.Wait()
	})
	addr := make(chan string, 1)
	go func() {
		lines := bufio.NewScanner(out)
		for lines.Scan() {
			fmt.Fprintln(ginkgo.GinkgoWriter, lines.Text())
			if a, ok := strings.CutPrefix(lines.Text(), "Listening for HTTP at address: "); ok {
				addr <- a
			}
		}
	}()
	var listening string
	gomega.Eventually(addr).WithTimeout(30*time.Second).Should(gomega.Receive(&listening), "stripe-mock did not say where it listens")
	return "http://" + listening
}
