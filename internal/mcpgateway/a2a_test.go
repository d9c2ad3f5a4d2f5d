package mcpgateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/demo"
	"github.com/toolledger/toolledger/internal/mcpgateway"
	"github.com/toolledger/toolledger/internal/testenv"
	"github.com/toolledger/toolledger/pkg/sdk"
)

// a2aReport is what testdata/tsclient/a2a.mjs prints.
type a2aReport struct {
	Sends []a2aTaskSeen `json:"sends"`
	Got   a2aTaskSeen   `json:"got"`
	// Skills are the skills of the card the client read as the agent.
	Skills []string `json:"skills"`
}

type a2aTaskSeen struct {
	ID       string         `json:"id"`
	State    int            `json:"state"`
	Metadata map[string]any `json:"metadata"`
	Result   map[string]any `json:"result"`
	Error    *struct {
		Code    int64  `json:"code"`
		Name    string `json:"name"`
		Message string `json:"message"`
	} `json:"error"`
}

// The A2A JavaScript SDK's TaskState numbers.
const (
	a2aWorking   = 2
	a2aCompleted = 3
)

// sendA2A runs the A2A JavaScript SDK's client: it sends one message
// invoking the skill pay, sends times.
func sendA2A(served servedTo, messageID, arguments string, sends int) a2aReport {
	GinkgoHelper()
	cmd := exec.CommandContext(context.Background(), tsClient(), "a2a.mjs")
	cmd.Dir = tsClientDir
	cmd.Env = append(os.Environ(), "A2A_URL="+served.base, "A2A_TOKEN="+served.agentToken, "MESSAGE_ID="+messageID,
		"SKILL=pay", "ARGUMENTS="+arguments, "SENDS="+strconv.Itoa(sends))
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, GinkgoWriter
	Expect(cmd.Run()).To(Succeed())
	var report a2aReport
	Expect(json.Unmarshal(stdout.Bytes(), &report)).To(Succeed(), stdout.String())
	return report
}

var _ = Describe("The gateway's A2A endpoint", func() {
	It("runs a message sent twice by the A2A JavaScript SDK's client once, as the same task, and names the catalog only to a caller", func() {
		ns := env.NewTenant()
		env.CreateTool(ns, "pay", testenv.WithParametersSchema(paySchema), testenv.WithKeyRetention(48*time.Hour), testenv.WithDownstreamKeyRetention(24*time.Hour))
		served := serveToAnAgent(ns, 3*time.Second, "pay")
		messageID := "9f0c2a4e-7b1d-4c3e-a5f6-0b1c2d3e4f50"
		name := sdk.ClientKey(served.agentName, "pay", messageID)

		By("sending the message twice: one effect, the same task, the second marked")
		report := sendA2A(served, messageID, `{"amount":1200,"currency":"EUR","customer":"c-a2a"}`, 2)
		Expect(report.Sends).To(HaveLen(2))
		for i, send := range report.Sends {
			Expect(send.Error).To(BeNil(), "send %d", i)
			Expect(send.ID).To(Equal(name))
			Expect(send.State).To(Equal(a2aCompleted))
			Expect(send.Metadata).To(HaveKeyWithValue("toolledger.dev/phase", "Succeeded"))
			Expect(send.Metadata).To(HaveKeyWithValue("toolledger.dev/messageId", messageID))
			Expect(send.Metadata["toolledger.dev/externalRef"]).To(Equal(env.Get(ns, name).Status.ExternalRef))
			status := env.Get(ns, name).Status
			Expect(send.Metadata).To(HaveKeyWithValue("toolledger.dev/keptUntil", status.KeptUntil.UTC().Format(time.RFC3339)))
			Expect(send.Metadata).To(HaveKeyWithValue("toolledger.dev/downstreamKeptUntil", status.DownstreamKeptUntil.UTC().Format(time.RFC3339)))
		}
		Expect(report.Sends[0].Metadata).To(HaveKeyWithValue("toolledger.dev/deduplicated", false))
		Expect(report.Sends[1].Metadata).To(HaveKeyWithValue("toolledger.dev/deduplicated", true))
		Expect(downstream.Requests(ns + "/" + name)).To(Equal(1))
		Expect(downstream.Effects(ns + "/" + name)).To(Equal(1))
		Expect(env.Get(ns, name).Spec.ClientKey).To(Equal(messageID))

		By("reading the task back, and the skills from the card the caller may read")
		Expect(report.Got.ID).To(Equal(name))
		Expect(report.Got.State).To(Equal(a2aCompleted))
		Expect(report.Skills).To(Equal([]string{"pay"}))
		resp, err := http.Get(served.base + mcpgateway.AgentCardPath)
		Expect(err).NotTo(HaveOccurred())
		card, err := io.ReadAll(resp.Body)
		Expect(err).NotTo(HaveOccurred())
		Expect(resp.Body.Close()).To(Succeed())
		Expect(string(card)).To(ContainSubstring(`"skills":[]`), "the public card names no skills")

		By("listing no skills to a caller who may not invoke them")
		stranger := serviceAccount(ns, "stranger", "")
		req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, served.base+mcpgateway.A2APath,
			strings.NewReader(`{"jsonrpc":"2.0","id":7,"method":"GetExtendedAgentCard","params":{}}`))
		Expect(err).NotTo(HaveOccurred())
		req.Header.Set("Authorization", "Bearer "+token(stranger, []string{served.endpoint}))
		req.Header.Set("A2A-Version", "1.0")
		req.Header.Set("Content-Type", "application/json")
		resp, err = http.DefaultClient.Do(req)
		Expect(err).NotTo(HaveOccurred())
		refusal, err := io.ReadAll(resp.Body)
		Expect(err).NotTo(HaveOccurred())
		Expect(resp.Body.Close()).To(Succeed())
		Expect(string(refusal)).To(ContainSubstring(`"reason":"FORBIDDEN"`))
		Expect(string(refusal)).NotTo(ContainSubstring(`"pay"`))

		By("refusing the messageId with another request: nothing executed")
		conflict := sendA2A(served, messageID, `{"amount":1300,"currency":"EUR","customer":"c-a2a"}`, 1)
		Expect(conflict.Sends[0].Error).NotTo(BeNil())
		Expect(conflict.Sends[0].Error.Code).To(BeEquivalentTo(-32602))
		Expect(conflict.Sends[0].Error.Name).To(Equal("RequestMalformedError"), "the SDK's class of -32602")
		Expect(conflict.Sends[0].Error.Message).To(ContainSubstring(`messageId "` + messageID + `" has already been sent with a different request`))
		Expect(downstream.Requests(ns + "/" + name)).To(Equal(1))

		By("answering a message still running as a working task, and its retry with the finished one")
		downstream.InjectFault(demo.Fault{Mode: demo.FaultDelay, Delay: 5 * time.Second})
		slowID := "1d2e3f40-5a6b-4c7d-8e9f-a0b1c2d3e4f5"
		slow := sendA2A(served, slowID, `{"amount":1400,"currency":"EUR","customer":"c-a2a"}`, 1)
		Expect(slow.Sends[0].State).To(Equal(a2aWorking))
		Expect(slow.Sends[0].Metadata).To(HaveKeyWithValue("toolledger.dev/phase", "Executing"))
		slowName := sdk.ClientKey(served.agentName, "pay", slowID)
		env.WaitForPhase(ns, slowName, v1alpha1.PhaseSucceeded)
		settled := sendA2A(served, slowID, `{"amount":1400,"currency":"EUR","customer":"c-a2a"}`, 1)
		Expect(settled.Sends[0].ID).To(Equal(slowName))
		Expect(settled.Sends[0].State).To(Equal(a2aCompleted))
		Expect(downstream.Effects(ns + "/" + slowName)).To(Equal(1))
	})
})
