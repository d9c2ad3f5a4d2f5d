package testenv

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// InstallRBAC applies files of config/rbac (such as "role_agent.yaml")
// under the field owner, under their shipped names and labels, and
// aggregates the ClusterRoles as a cluster's kube-controller-manager would,
// so that the built-in admin, edit and view roles grant what the shipped
// aggregated personas add to them. remove deletes the files' objects and
// aggregates again, leaving admin, edit and view with the built-in rules
// only.
func InstallRBAC(ctx context.Context, cfg *rest.Config, c client.Client, owner string, files ...string) (remove func() error, err error) {
	paths := make([]string, len(files))
	for i, file := range files {
		paths[i] = filepath.Join(repoRoot(), "config", "rbac", file)
	}
	remove = func() error {
		var errs []error
		for _, path := range paths {
			errs = append(errs, DeleteFile(ctx, cfg, path))
		}
		return errors.Join(append(errs, AggregateClusterRoles(ctx, c))...)
	}
	for _, path := range paths {
		if err := ApplyFile(ctx, cfg, path, owner); err != nil {
			return nil, errors.Join(err, remove())
		}
	}
	if err := AggregateClusterRoles(ctx, c); err != nil {
		return nil, errors.Join(err, remove())
	}
	return remove, nil
}

// AggregateClusterRoles does once what the clusterrole-aggregation
// controller of kube-controller-manager does on every change, and envtest,
// which runs no controller manager, never does: it sets the rules of each
// ClusterRole with an aggregationRule to the union of the rules of the
// other ClusterRoles its selectors match, in the controller's order
// (selector by selector, roles by name, each distinct rule once). Aggregated
// roles are themselves aggregated (view into edit, edit into admin), so it
// repeats until no role changes.
func AggregateClusterRoles(ctx context.Context, c client.Client) error {
	// More rounds than any chain of aggregated roles needs: view, edit, admin.
	const maxRounds = 8
	for range maxRounds {
		var roles rbacv1.ClusterRoleList
		if err := c.List(ctx, &roles); err != nil {
			return fmt.Errorf("cannot list ClusterRoles: %w", err)
		}
		slices.SortFunc(roles.Items, func(a, b rbacv1.ClusterRole) int { return strings.Compare(a.Name, b.Name) })
		changed := false
		for i := range roles.Items {
			role := &roles.Items[i]
			if role.AggregationRule == nil {
				continue
			}
			rules, err := aggregatedRules(role, roles.Items)
			if err != nil {
				return err
			}
			if equality.Semantic.DeepEqual(rules, role.Rules) {
				continue
			}
			role.Rules = rules
			if err := c.Update(ctx, role); err != nil {
				return fmt.Errorf("cannot aggregate ClusterRole %s: %w", role.Name, err)
			}
			changed = true
		}
		if !changed {
			return nil
		}
	}
	return fmt.Errorf("the aggregated ClusterRoles still change after %d rounds", maxRounds)
}

// aggregatedRules are the rules the aggregation controller gives role,
// from roles sorted by name.
func aggregatedRules(role *rbacv1.ClusterRole, roles []rbacv1.ClusterRole) ([]rbacv1.PolicyRule, error) {
	rules := []rbacv1.PolicyRule{}
	for i := range role.AggregationRule.ClusterRoleSelectors {
		selector, err := metav1.LabelSelectorAsSelector(&role.AggregationRule.ClusterRoleSelectors[i])
		if err != nil {
			return nil, fmt.Errorf("ClusterRole %s: %w", role.Name, err)
		}
		for _, other := range roles {
			if other.Name == role.Name || !selector.Matches(labels.Set(other.Labels)) {
				continue
			}
			for _, rule := range other.Rules {
				if !slices.ContainsFunc(rules, func(r rbacv1.PolicyRule) bool { return equality.Semantic.DeepEqual(r, rule) }) {
					rules = append(rules, rule)
				}
			}
		}
	}
	return rules, nil
}
