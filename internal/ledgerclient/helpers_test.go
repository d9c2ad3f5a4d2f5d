package ledgerclient

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var now = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func at(offset time.Duration) metav1.Time { return metav1.NewTime(now.Add(offset)) }

func timePtr(offset time.Duration) *metav1.Time {
	t := at(offset)
	return &t
}
