package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/testenv"
)

// parametersRefused is what the API server answers, after the action's
// name, when config/admission's parameters policy refuses it.
const parametersRefused = ` is forbidden: ValidatingAdmissionPolicy 'toolledger-parameters' with binding 'toolledger-parameters' denied request: `

// numbers is a JSON array of n distinct numbers.
func numbers(n int) string {
	items := make([]string, n)
	for i := range items {
		items[i] = strconv.Itoa(i)
	}
	return "[" + strings.Join(items, ",") + "]"
}

// nested is a value nested in depth arrays, the innermost holding 1.
func nested(depth int) string {
	return strings.Repeat("[", depth) + "1" + strings.Repeat("]", depth)
}

var _ = Describe("The parameters admission policy (config/admission)", Ordered, func() {
	ctx := context.Background()
	policy := filepath.Join("..", "..", "config", "admission", "parameters_policy.yaml")
	var ns string

	create := func(name string, parameters map[string]string) error {
		action := &v1alpha1.ToolAction{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: v1alpha1.ToolActionSpec{ToolRef: v1alpha1.ToolReference{Name: "charge"}, Parameters: map[string]apiextensionsv1.JSON{}}}
		for k, v := range parameters {
			action.Spec.Parameters[k] = apiextensionsv1.JSON{Raw: []byte(v)}
		}
		return k8s.Create(ctx, action, client.DryRunAll)
	}
	refused := func(name string, parameters map[string]string, message string) {
		GinkgoHelper()
		err := create(name, parameters)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(Equal(`toolactions.toolledger.dev "` + name + `"` + parametersRefused + message))
	}

	BeforeAll(func() {
		ns = env.NewTenant()
		Expect(testenv.ApplyFile(ctx, env.Config, policy, "integration")).To(Succeed())
		DeferCleanup(func() { Expect(testenv.DeleteFile(ctx, env.Config, policy)).To(Succeed()) })
		// The API server loads a new policy within moments.
		Eventually(func() error { return create("probe", map[string]string{"ids": numbers(10000)}) }).Should(HaveOccurred())
	})

	tooMany := func(counted int) string {
		return fmt.Sprintf("spec.parameters holds more than 10000 values (objects, arrays and their members counted, %d or more here): "+
			"the API server decodes each of them again for every version it serves, which would slow every tenant's actions; "+
			"pass large data as one string, or by reference", counted)
	}

	It("refuses an action of 150,000 numbers before the API server stores it", func() {
		refused("hostile", map[string]string{"ids": numbers(150000)}, tooMany(150001))
		// Near the API server's 3 MiB bound on a request, the check stays
		// within CEL's cost limit, one level wide or two.
		refused("hostile-wide", map[string]string{"ids": numbers(400000)}, tooMany(400001))
		wide := map[string]string{}
		for i := range 256 {
			wide[fmt.Sprintf("k%03d", i)] = `[` + numbers(1500) + `]`
		}
		refused("hostile-nested", wide, tooMany(384512))
	})

	It("counts every value at every level: 10,000 pass, one more does not", func() {
		Expect(create("at-limit", map[string]string{"ids": numbers(9999)})).To(Succeed())
		refused("over-limit", map[string]string{"ids": numbers(10000)}, tooMany(10001))

		// The same values spread over many members and a level deeper.
		spread := map[string]string{}
		for i := range 200 {
			spread[fmt.Sprintf("k%03d", i)] = `{"rows": ` + numbers(48) + `}`
		}
		Expect(create("spread-at-limit", spread)).To(Succeed(), "200 objects, 200 arrays and 9,600 numbers")
		spread["k200"] = `[1]`
		refused("spread-over-limit", spread, tooMany(10002))
	})

	It("refuses values nested deeper than 8 levels, and keeps what a tool call sends", func() {
		Expect(create("deep-at-limit", map[string]string{"v": nested(7)})).To(Succeed(), "the number is at level 8")
		refused("too-deep", map[string]string{"v": nested(8)},
			"spec.parameters nests deeper than 8 levels of objects and arrays: pass deeper data as one string, or by reference")

		Expect(create("order", map[string]string{
			"amount":   "1999",
			"currency": `"eur"`,
			"items":    `[{"sku": "A-1", "quantity": 2, "metadata": {"gift": true, "tags": ["red", "xl"]}}]`,
			"note":     `"` + strings.Repeat("x", 512<<10) + `"`,
		})).To(Succeed(), "a string of 512 KiB is one value")
	})
})
