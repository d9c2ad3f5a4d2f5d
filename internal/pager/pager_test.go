package pager

import (
	"context"
	"errors"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// pages serves ConfigMaps named 0…total-1 by pages of the limit asked for,
// the continue token being the next index, as the API server's is opaque.
type pages struct {
	client.Reader
	total  int
	limits []int64
	fail   error
}

func (p *pages) List(_ context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if p.fail != nil {
		return p.fail
	}
	var o client.ListOptions
	o.ApplyOptions(opts)
	p.limits = append(p.limits, o.Limit)
	from := 0
	if o.Continue != "" {
		from, _ = strconv.Atoi(o.Continue)
	}
	page := list.(*corev1.ConfigMapList)
	to := min(from+int(o.Limit), p.total)
	for i := from; i < to; i++ {
		page.Items = append(page.Items, corev1.ConfigMap{})
		page.Items[len(page.Items)-1].Name = strconv.Itoa(i)
	}
	if to < p.total {
		page.Continue = strconv.Itoa(to)
	}
	return nil
}

func configMaps(l *corev1.ConfigMapList) []corev1.ConfigMap { return l.Items }

func TestEachVisitsEveryPageInOrder(t *testing.T) {
	reader := &pages{total: 2*PageSize + 7}
	var seen []string
	err := Each(context.Background(), reader, "the ConfigMaps", configMaps, nil, func(cm *corev1.ConfigMap) error {
		seen = append(seen, cm.Name)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != reader.total || seen[0] != "0" || seen[len(seen)-1] != strconv.Itoa(reader.total-1) {
		t.Errorf("visited %d items (%v … %v), want %d in order", len(seen), seen[:1], seen[len(seen)-1:], reader.total)
	}
	if want := []int64{PageSize, PageSize, PageSize}; len(reader.limits) != 3 || reader.limits[0] != want[0] || reader.limits[2] != want[2] {
		t.Errorf("limits asked %v, want %v", reader.limits, want)
	}
}

func TestEachStopsAtTheFirstError(t *testing.T) {
	stop := errors.New("stop")
	visits := 0
	err := Each(context.Background(), &pages{total: 3 * PageSize}, "the ConfigMaps", configMaps, nil, func(*corev1.ConfigMap) error {
		visits++
		if visits == 3 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || visits != 3 {
		t.Errorf("err %v after %d visits, want the visit's own error after 3", err, visits)
	}
	err = Each(context.Background(), &pages{fail: errors.New("forbidden")}, "the ConfigMaps", configMaps, nil, func(*corev1.ConfigMap) error { return nil })
	if err == nil || err.Error() != "cannot list the ConfigMaps: forbidden" {
		t.Errorf("list error %v, want it named", err)
	}
}
