package mcpgateway_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/mcpgateway"
	"github.com/toolledger/toolledger/internal/testenv"
)

// The gateway checks a call's arguments before anything else, its
// authorization included: a check must cost no more than the catalog's
// bounds allow.
var _ = Describe("The MCP gateway's argument check", func() {
	It("publishes no uniqueItems tool, and refuses arguments over the check's cost before recording anything", func() {
		ns := env.NewTenant()
		env.CreateTool(ns, "pay", testenv.WithParametersSchema(`{"type": "object", "properties": {"ids": {"type": "array",
			"items": {"anyOf": [{"minimum": 0}, {"minimum": 1}, {"minimum": 2}, {"minimum": 3}, {"minimum": 4}, {"minimum": 5}, {"minimum": 6}, {"minimum": 7}]}}}}`))
		env.CreateTool(ns, "unique", testenv.WithParametersSchema(
			`{"type": "object", "properties": {"ids": {"type": "array", "items": {"type": "number"}, "uniqueItems": true}}}`))
		g := startGateway(ns, cfg, "pay")
		Eventually(func(g Gomega) {
			var tool v1alpha1.Tool
			g.Expect(k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "unique"}, &tool)).To(Succeed())
			ready := meta.FindStatusCondition(tool.Status.Conditions, v1alpha1.ConditionToolReady)
			g.Expect(ready).NotTo(BeNil())
			g.Expect(ready.Reason).To(Equal("UnsupportedSchema"))
		}).Should(Succeed())
		Expect(g.Tools()).To(ConsistOf("pay"))

		numbers := make([]string, 150_000)
		for i := range numbers {
			numbers[i] = strconv.Itoa(i)
		}
		res, refused := pay(inMemory(g, nil), json.RawMessage(`{"ids": [`+strings.Join(numbers, ",")+`]}`), nil)
		Expect(res.IsError).To(BeTrue())
		Expect(refused).To(Equal(mcpgateway.Outcome{Phase: mcpgateway.PhaseNotRecorded, ErrorClass: "InvalidInput", ErrorReason: "InvalidArguments",
			Message: "arguments hold 150002 values and the tool's parametersSchema costs up to 576 to check each: " +
				"86401152 is over the limit of 33554432; send fewer values; nothing was recorded: correct the arguments and call again"}))
		Expect(actionsIn(ns)).To(BeZero())
	})

	It("answers a call the parameters admission policy refuses with the policy's reason, and records nothing", func() {
		ctx := context.Background()
		policy := filepath.Join("..", "..", "config", "admission", "parameters_policy.yaml")
		Expect(testenv.ApplyFile(ctx, cfg, policy, "mcpgateway-suite")).To(Succeed())
		DeferCleanup(func() { Expect(testenv.DeleteFile(ctx, cfg, policy)).To(Succeed()) })
		ns := env.NewTenant()
		env.CreateTool(ns, "pay", testenv.WithParametersSchema(`{"type": "object", "properties": {"ids": {"type": "array", "items": {"type": "number"}}}}`))
		g := startGateway(ns, cfg, "pay")
		cs := inMemory(g, nil)

		numbers := make([]string, 20_000)
		for i := range numbers {
			numbers[i] = strconv.Itoa(i)
		}
		ids := json.RawMessage(`[` + strings.Join(numbers, ",") + `]`)
		// The API server loads a new policy within moments; a server-side
		// dry run shows when it applies.
		Eventually(func() error {
			return k8s.Create(ctx, &v1alpha1.ToolAction{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "probe"},
				Spec: v1alpha1.ToolActionSpec{ToolRef: v1alpha1.ToolReference{Name: "pay"},
					Parameters: map[string]apiextensionsv1.JSON{"ids": {Raw: ids}}}}, client.DryRunAll)
		}).Should(HaveOccurred())
		_, refused := pay(cs, json.RawMessage(`{"ids": `+string(ids)+`}`), nil)
		Expect(refused.ErrorReason).To(Equal("InvalidRequest"))
		Expect(refused.ErrorClass).To(Equal("InvalidInput"))
		Expect(refused.Message).To(ContainSubstring("denied request: spec.parameters holds more than 10000 values " +
			"(objects, arrays and their members counted, 20001 or more here)"))
		Expect(actionsIn(ns)).To(BeZero())
	})
})
