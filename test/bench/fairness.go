package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"time"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/cmd/manager/app"
	"github.com/toolledger/toolledger/internal/testenv"
	"github.com/toolledger/toolledger/pkg/sdk"
)

// The harness's own identity is envtest's admin, in system:masters, whose
// requests API Priority and Fairness exempts. For APF to apply, the costly
// step's tenants also run as the API server's users: tenant users the
// harness impersonates, each with config/rbac's agent role in its
// namespace, as an agent's ServiceAccount would be.
const (
	healthyUser = "tenant-healthy"
	hostileUser = "tenant-hostile"
	// tenantsFlow names the candidate FlowSchema and its priority level.
	tenantsFlow = "toolledger-tenants"
)

// tenantClients are the two tenants' clients. With bare set, the healthy
// tenant is a bare client (the ceiling's three writes, no controller), not
// the SDK through toolledger: what the API server itself can do beside the
// hostile tenant.
type tenantClients struct {
	healthy *sdk.Client
	bare    *ceilingClient
	hostile client.Client
}

// asTenants grants the agent role to each tenant user in its namespace
// and returns clients that impersonate them; the healthy one times its
// creates into lastCreate.
func (b *bench) asTenants(ctx context.Context, healthyNS, hostileNS string, timing func(*rest.Config) *rest.Config) (*tenantClients, error) {
	if err := testenv.ApplyFile(ctx, b.c.cfg, filepath.Join(b.root, "config", "rbac", "role_agent.yaml"), "toolledger-bench"); err != nil {
		return nil, err
	}
	for ns, user := range map[string]string{healthyNS: healthyUser, hostileNS: hostileUser} {
		binding := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: user},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "toolledger-agent"},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
		}
		if err := b.c.k8s.Create(ctx, binding); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("cannot grant the agent role to %s: %w", user, err)
		}
	}
	healthy, err := sdk.NewClient(timing(asUser(b.c.cfg, healthyUser)))
	if err != nil {
		return nil, err
	}
	hostile, err := client.New(asUser(b.c.cfg, hostileUser), client.Options{Scheme: app.Scheme()})
	if err != nil {
		return nil, err
	}
	return &tenantClients{healthy: healthy, hostile: hostile}, nil
}

func asUser(cfg *rest.Config, user string) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
	return out
}

// useTenantFlowSchema installs or removes the candidate FlowSchema: every
// user's writes of ToolActions in a priority level of their own, a few
// seats that it neither lends nor borrows, with one flow per namespace, so
// that a tenant's requests beyond the seats queue behind its own. It
// returns once the API server classifies the healthy tenant's requests
// accordingly (APF names the FlowSchema in a response header).
func (b *bench) useTenantFlowSchema(ctx context.Context, namespace string, on bool) error {
	level := &flowcontrolv1.PriorityLevelConfiguration{ObjectMeta: metav1.ObjectMeta{Name: tenantsFlow},
		Spec: flowcontrolv1.PriorityLevelConfigurationSpec{Type: flowcontrolv1.PriorityLevelEnablementLimited,
			Limited: &flowcontrolv1.LimitedPriorityLevelConfiguration{
				NominalConcurrencyShares: ptr.To[int32](2), LendablePercent: ptr.To[int32](0), BorrowingLimitPercent: ptr.To[int32](0),
				LimitResponse: flowcontrolv1.LimitResponse{Type: flowcontrolv1.LimitResponseTypeQueue,
					Queuing: &flowcontrolv1.QueuingConfiguration{Queues: 64, HandSize: 4, QueueLengthLimit: 50}},
			}}}
	schema := &flowcontrolv1.FlowSchema{ObjectMeta: metav1.ObjectMeta{Name: tenantsFlow},
		Spec: flowcontrolv1.FlowSchemaSpec{
			PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: tenantsFlow},
			MatchingPrecedence:         1000,
			DistinguisherMethod:        &flowcontrolv1.FlowDistinguisherMethod{Type: flowcontrolv1.FlowDistinguisherMethodByNamespaceType},
			Rules: []flowcontrolv1.PolicyRulesWithSubjects{{
				Subjects: []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindGroup, Group: &flowcontrolv1.GroupSubject{Name: "system:authenticated"}}},
				ResourceRules: []flowcontrolv1.ResourcePolicyRule{{Verbs: []string{"create", "patch", "update"},
					APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"toolactions"}, Namespaces: []string{flowcontrolv1.NamespaceEvery}}},
			}},
		}}
	for _, obj := range []client.Object{level, schema} {
		var err error
		if on {
			err = b.c.k8s.Create(ctx, obj)
		} else {
			err = client.IgnoreNotFound(b.c.k8s.Delete(ctx, obj))
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("cannot change %T %s: %w", obj, tenantsFlow, err)
		}
	}
	// One client for every probe: a transport each would keep its
	// connections open.
	probe, err := rest.HTTPClientFor(asUser(b.c.cfg, healthyUser))
	if err != nil {
		return err
	}
	defer probe.CloseIdleConnections()
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		name, err := b.flowSchemaOf(ctx, probe, namespace)
		return (name == tenantsFlow) == on, err
	})
	if wait.Interrupted(err) && ctx.Err() == nil {
		return fmt.Errorf("the API server did not take up the change of FlowSchema %s within a minute", tenantsFlow)
	}
	return err
}

// flowSchemaOf names the FlowSchema that classifies the healthy tenant's
// creates in namespace: a dry-run create, sent with the healthy tenant's
// client hc, whose answer APF labels with the FlowSchema's UID.
func (b *bench) flowSchemaOf(ctx context.Context, hc *http.Client, namespace string) (string, error) {
	body, err := json.Marshal(&v1alpha1.ToolAction{TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "ToolAction"},
		ObjectMeta: metav1.ObjectMeta{Name: "apf-probe"}, Spec: v1alpha1.ToolActionSpec{ToolRef: v1alpha1.ToolReference{Name: toolName}}})
	if err != nil {
		return "", err
	}
	url := fmt.Sprintf("%s/apis/%s/namespaces/%s/toolactions?dryRun=All", b.c.cfg.Host, v1alpha1.GroupVersion, namespace)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	_ = resp.Body.Close()
	uid := resp.Header.Get(flowcontrolv1.ResponseHeaderMatchedFlowSchemaUID)
	var schemas flowcontrolv1.FlowSchemaList
	if err := b.c.k8s.List(ctx, &schemas); err != nil {
		return "", err
	}
	for _, s := range schemas.Items {
		if string(s.UID) == uid {
			return s.Name, nil
		}
	}
	return "", nil
}
