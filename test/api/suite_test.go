// Package api holds the specs of what the API server does with toolledger's
// objects, with no manager running: the CRDs' schemas and CEL rules, the
// admission policies of config/admission and the roles of config/rbac.
// What a reconciler does is the controllers suite's.
package api

import (
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/internal/testenv"
	"github.com/toolledger/toolledger/internal/testenv/specenv"
)

var (
	env *specenv.Env
	k8s client.Client
)

func TestAPI(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "API, admission and RBAC suite")
}

var _ = BeforeSuite(func() {
	SetDefaultEventuallyTimeout(30 * time.Second)
	SetDefaultEventuallyPollingInterval(50 * time.Millisecond)

	env = specenv.Start(testenv.SuiteOptions{})
	k8s = env.Client
	env.AddKubeconfig()
})
