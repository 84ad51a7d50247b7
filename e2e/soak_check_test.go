package e2e_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestSoakCheckWrites checks the soak's write check on made-up histories:
// what it must call lost, duplicated or fine (18 cases). No cluster.
func TestSoakCheckWrites(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	obj := func(name, id string) corev1.ConfigMap {
		return corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{soakIDLabel: id}}}
	}
	logCM := func(ids string) corev1.ConfigMap {
		return corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "soak-log-0"}, Data: map[string]string{"log": ids}}
	}
	create := func(id, name string, end int, err string) soakOp {
		return soakOp{Kind: "create", ID: id, Name: name, Start: at(end - 1), End: at(end), Err: err}
	}
	update := func(id string, end int, err string) soakOp {
		return soakOp{Kind: "update", ID: id, Name: "soak-log-0", Start: at(end - 1), End: at(end), Err: err}
	}
	del := func(id, name string, end int, err string) soakOp {
		return soakOp{Kind: "delete", ID: id, Name: name, Start: at(end - 1), End: at(end), Err: err}
	}
	asOf := at(100)
	for _, tc := range []struct {
		name            string
		ops             []soakOp
		objs            []corev1.ConfigMap
		lost, dup, unkn int
	}{
		{"all there", []soakOp{create("c1", "a", 1, ""), update("u1", 2, "")}, []corev1.ConfigMap{obj("a", "c1"), logCM(" u1")}, 0, 0, 0},
		{"create lost", []soakOp{create("c1", "a", 1, "")}, []corev1.ConfigMap{logCM("")}, 1, 0, 0},
		{"create replayed", []soakOp{create("c1", "a", 1, "")}, []corev1.ConfigMap{obj("a", "c1"), obj("b", "c1"), logCM("")}, 0, 1, 0},
		{"create replayed, the first deleted", []soakOp{create("c1", "a", 1, ""), del("c1", "a", 2, "")}, []corev1.ConfigMap{obj("b", "c1"), logCM("")}, 0, 1, 0},
		{"a new object under a deleted one's name", []soakOp{create("c1", "a", 1, ""), del("c1", "a", 2, ""), create("c2", "a", 3, "")}, []corev1.ConfigMap{obj("a", "c2"), logCM("")}, 0, 0, 0},
		{"a new object under a deleted one's name, lost", []soakOp{create("c1", "a", 1, ""), del("c1", "a", 2, ""), create("c2", "a", 3, "")}, []corev1.ConfigMap{logCM("")}, 1, 0, 0},
		{"failed create absent", []soakOp{create("c1", "", 1, "timeout")}, []corev1.ConfigMap{logCM("")}, 0, 0, 0},
		{"failed create present once", []soakOp{create("c1", "", 1, "timeout")}, []corev1.ConfigMap{obj("a", "c1"), logCM("")}, 0, 0, 0},
		{"failed create present twice", []soakOp{create("c1", "", 1, "timeout")}, []corev1.ConfigMap{obj("a", "c1"), obj("b", "c1"), logCM("")}, 0, 1, 0},
		{"create after asOf absent", []soakOp{create("c1", "a", 101, "")}, []corev1.ConfigMap{logCM("")}, 0, 0, 0},
		{"deleted", []soakOp{create("c1", "a", 1, ""), del("c1", "a", 2, "")}, []corev1.ConfigMap{logCM("")}, 0, 0, 0},
		{"delete lost", []soakOp{create("c1", "a", 1, ""), del("c1", "a", 2, "")}, []corev1.ConfigMap{obj("a", "c1"), logCM("")}, 1, 0, 0},
		{"delete failed, object there", []soakOp{create("c1", "a", 1, ""), del("c1", "a", 2, "EOF")}, []corev1.ConfigMap{obj("a", "c1"), logCM("")}, 0, 0, 0},
		{"delete running at the list", []soakOp{create("c1", "a", 1, ""), {Kind: "delete", ID: "c1", Name: "a", Start: at(99)}}, []corev1.ConfigMap{logCM("")}, 0, 0, 0},
		{"update lost", []soakOp{update("u1", 2, "")}, []corev1.ConfigMap{logCM("")}, 1, 0, 0},
		{"update replayed", []soakOp{update("u1", 2, "")}, []corev1.ConfigMap{logCM(" u1 u1")}, 0, 1, 0},
		{"failed update applied once", []soakOp{update("u1", 2, "conflict")}, []corev1.ConfigMap{logCM(" u1")}, 0, 0, 0},
		{"unknown object", nil, []corev1.ConfigMap{obj("a", "zz"), logCM("")}, 0, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := checkWrites(tc.ops, tc.objs, asOf)
			if len(c.Lost) != tc.lost || len(c.Duplicated) != tc.dup || len(c.Unknown) != tc.unkn {
				t.Errorf("lost %v, duplicated %v, unknown %v; want %d, %d, %d", c.Lost, c.Duplicated, c.Unknown, tc.lost, tc.dup, tc.unkn)
			}
			if ok := tc.lost+tc.dup+tc.unkn == 0; c.ok() != ok {
				t.Errorf("ok() = %v, want %v", c.ok(), ok)
			}
		})
	}

}
