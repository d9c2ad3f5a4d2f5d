package testnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
)

// changedSysctls are the machine's tunables the node's network changes:
// the bridge plugin turns forwarding on. Their values are restored at
// teardown.
var changedSysctls = []string{"net.ipv4.ip_forward"}

// forwardDrop keeps every packet a pod sends off the machine: what leaves
// the bridge for any other interface is dropped; the host itself (the API
// server, CoreDNS, the test's servers on BridgeIP) is reached through INPUT.
var forwardDrop = []string{"FORWARD", "-i", Bridge, "!", "-o", Bridge, "-j", "DROP"}

func (c *Cluster) upNetwork(ctx context.Context) error {
	for _, name := range changedSysctls {
		value, err := readSysctl(name)
		if err != nil {
			return err
		}
		if err := writeFile(c.path("run", "sysctl."+name), value); err != nil {
			return err
		}
	}
	for _, argv := range [][]string{
		{"ip", "link", "add", Bridge, "type", "bridge"},
		{"ip", "addr", "add", BridgeIP + "/24", "dev", Bridge},
		{"ip", "link", "set", Bridge, "up"},
		// Host processes (the suite, the API server) reach ClusterIPs
		// through kube-proxy's rules, on the bridge.
		{"ip", "route", "replace", ServiceCIDR, "dev", Bridge, "src", BridgeIP},
		append([]string{"iptables", "-I", forwardDrop[0], "1"}, forwardDrop[1:]...),
	} {
		if err := run(ctx, argv...); err != nil {
			return err
		}
	}
	return nil
}

// downNetwork removes what upNetwork and the node's components added: the
// bridge and its route, the drop rule, kube-proxy's and the kubelet's
// chains, and restores the tunables.
func (c *Cluster) downNetwork(ctx context.Context) error {
	var errs []error
	for run(ctx, append([]string{"iptables", "-D"}, forwardDrop...)...) == nil {
	}
	if _, err := os.Stat("/sys/class/net/" + Bridge); err == nil {
		errs = append(errs, run(ctx, "ip", "link", "delete", Bridge))
	}
	for _, family := range []string{"iptables", "ip6tables"} {
		errs = append(errs, removeKubeChains(ctx, family))
	}
	for _, name := range changedSysctls {
		recorded := c.path("run", "sysctl."+name)
		value, err := os.ReadFile(recorded)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, os.WriteFile(sysctlPath(name), value, 0o600), removeIfExists(recorded))
	}
	return errors.Join(errs...)
}

// removeKubeChains deletes, in every table of family, the rules that jump
// to a KUBE- chain and then those chains: kube-proxy's (which --cleanup
// would remove too) and the kubelet's canaries. Nothing else of the
// machine's uses that prefix.
func removeKubeChains(ctx context.Context, family string) error {
	for _, table := range []string{"filter", "nat", "mangle"} {
		dump, err := output(ctx, family+"-save", "-t", table)
		if err != nil {
			// A family or table the kernel lacks has nothing of the node's.
			continue
		}
		var chains []string
		for line := range strings.Lines(dump) {
			line = strings.TrimSpace(line)
			switch {
			case strings.HasPrefix(line, ":KUBE-"):
				chains = append(chains, strings.Fields(line[1:])[0])
			case strings.HasPrefix(line, "-A ") && strings.Contains(line, " -j KUBE-") && !strings.HasPrefix(line, "-A KUBE-"):
				if err := run(ctx, append([]string{family, "-t", table, "-D"}, splitRule(line)[1:]...)...); err != nil {
					return err
				}
			}
		}
		for _, chain := range chains {
			if err := run(ctx, family, "-t", table, "-F", chain); err != nil {
				return err
			}
		}
		for _, chain := range chains {
			if err := run(ctx, family, "-t", table, "-X", chain); err != nil {
				return err
			}
		}
	}
	return nil
}

// splitRule splits a rule of iptables-save into its arguments: words, or
// double-quoted strings (a comment) with their quotes removed.
func splitRule(line string) []string {
	var args []string
	for line != "" {
		line = strings.TrimLeft(line, " ")
		if strings.HasPrefix(line, `"`) {
			quoted, rest, _ := strings.Cut(line[1:], `"`)
			args, line = append(args, quoted), rest
			continue
		}
		word, rest, _ := strings.Cut(line, " ")
		if word != "" {
			args = append(args, word)
		}
		line = rest
	}
	return args
}

// removeCgroups removes the cgroups the kubelet made (kubepods and its
// children) in every hierarchy, the deepest first.
func removeCgroups() error {
	var errs []error
	hierarchies, _ := os.ReadDir("/sys/fs/cgroup")
	for _, h := range hierarchies {
		root := "/sys/fs/cgroup/" + h.Name()
		for _, top := range []string{"kubepods", "kubepods.slice"} {
			errs = append(errs, removeCgroupTree(root+"/"+top))
		}
	}
	return errors.Join(errs...)
}

func removeCgroupTree(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := removeCgroupTree(dir + "/" + e.Name()); err != nil {
				return err
			}
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("cannot remove the cgroup %s: %w", dir, err)
	}
	return nil
}
