package identity

import (
	"errors"
	"fmt"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
)

// ErrPrivileged is wrapped for an authenticated user whom the front ends
// refuse to impersonate (see Impersonable).
var ErrPrivileged = errors.New("the front end does not act for Kubernetes' own identities")

// Names of the identities Kubernetes reserves (the "system:" prefix) that
// a front end still acts for: ServiceAccounts, which agents run as, and the
// groups every ServiceAccount or authenticated user is in.
const (
	systemPrefix          = "system:"
	serviceAccountPrefix  = "system:serviceaccount:"
	serviceAccountsGroup  = "system:serviceaccounts"
	authenticatedGroup    = "system:authenticated"
	serviceAccountsPrefix = serviceAccountsGroup + ":"
)

// Impersonable refuses, with ErrPrivileged, a user the front ends must not
// impersonate although the API server authenticated them. The rule: every
// user name and group with the "system:" prefix is refused, except a
// ServiceAccount's user (system:serviceaccount:NAMESPACE:NAME) and the
// groups system:authenticated, system:serviceaccounts and
// system:serviceaccounts:NAMESPACE. That refuses system:masters,
// system:nodes and every node, controller and component identity
// (system:admin, system:kube-*, system:node:*...), whose rights a front end
// would otherwise wield for whoever held their token.
func Impersonable(user authenticationv1.UserInfo) error {
	if reserved(user.Username) && !serviceAccountUser(user.Username) {
		return fmt.Errorf("%w: user %q has the reserved %q prefix", ErrPrivileged, user.Username, systemPrefix)
	}
	for _, group := range user.Groups {
		if reserved(group) && !ordinaryGroup(group) {
			return fmt.Errorf("%w: user %q is in group %q", ErrPrivileged, user.Username, group)
		}
	}
	return nil
}

func reserved(name string) bool { return strings.HasPrefix(name, systemPrefix) }

// serviceAccountUser reports a ServiceAccount's user name: the prefix,
// then a namespace and a name, both non-empty.
func serviceAccountUser(name string) bool {
	namespace, sa, ok := strings.Cut(strings.TrimPrefix(name, serviceAccountPrefix), ":")
	return strings.HasPrefix(name, serviceAccountPrefix) && ok && namespace != "" && sa != "" && !strings.Contains(sa, ":")
}

// ordinaryGroup reports a reserved group that grants nothing by itself.
func ordinaryGroup(group string) bool {
	if group == authenticatedGroup || group == serviceAccountsGroup {
		return true
	}
	namespace, ok := strings.CutPrefix(group, serviceAccountsPrefix)
	return ok && namespace != "" && !strings.Contains(namespace, ":")
}

// ServiceAccountByName returns what constrained impersonation (KEP-5284)
// may assert of user: a ServiceAccount by its name alone, as its
// serviceaccount mode requires (the API server adds the ServiceAccount's
// groups itself; the token's UID and extras, such as the pod it was bound
// to, are not asserted); any other user as authenticated.
func ServiceAccountByName(user authenticationv1.UserInfo) authenticationv1.UserInfo {
	if serviceAccountUser(user.Username) {
		return authenticationv1.UserInfo{Username: user.Username}
	}
	return user
}
