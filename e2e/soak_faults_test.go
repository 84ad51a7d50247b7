package e2e_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/fanout-dev/fanout/e2e/harness"
)

// The soak's faults, one every soakFaultEvery. Each runs to its end (the
// apiserver ready again, the host reconnected, the APF objects gone, the
// sidecar restarted and ready, the new credentials in use) and reports
// what it hit.
const (
	faultRoll        = "roll"           // graceful rolling restart of every apiserver
	faultKillAPI     = "kill-apiserver" // SIGKILL of one, started again 10 s later
	faultCut         = "cut-host"       // one apiserver's host off the network for 30 s
	faultAPF         = "apf-overload"   // the soak user's requests rejected by APF for 30 s
	faultKillSidecar = "kill-sidecar"   // SIGKILL of an in-pod fanout; the kubelet restarts it
	faultRotate      = "rotate"         // the host fanout's client certificate, or the apiservers' serving certificate
)

var soakFaultKinds = []string{faultRoll, faultKillAPI, faultCut, faultAPF, faultKillSidecar, faultRotate}

// soakFault is one fault's window: from Start to End, the fault was on.
type soakFault struct {
	Kind   string    `json:"kind"`
	Target string    `json:"target"`
	Start  time.Time `json:"start"`
	End    time.Time `json:"end"`
	Err    string    `json:"err,omitempty"`
}

// soakFaultBag draws fault kinds without replacement, refilling when all
// six have been drawn: every kind comes once in each six faults, in an
// order the seed decides.
type soakFaultBag struct {
	rng  *rand.Rand
	left []string
}

func (b *soakFaultBag) next() string {
	if len(b.left) == 0 {
		b.left = append([]string(nil), soakFaultKinds...)
		b.rng.Shuffle(len(b.left), func(i, j int) { b.left[i], b.left[j] = b.left[j], b.left[i] })
	}
	k := b.left[0]
	b.left = b.left[1:]
	return k
}

// inject runs one fault of kind and returns its window.
func (s *soak) inject(ctx context.Context, kind string) soakFault {
	f := soakFault{Kind: kind, Start: time.Now()}
	var err error
	switch kind {
	case faultRoll:
		f.Target, err = s.roll(ctx)
	case faultKillAPI:
		f.Target, err = s.killAPIServer(ctx)
	case faultCut:
		f.Target, err = s.cutHost(ctx)
	case faultAPF:
		f.Target, err = s.apfOverload(ctx)
	case faultKillSidecar:
		f.Target, err = s.killSidecar(ctx)
	case faultRotate:
		f.Target, err = s.rotate(ctx)
	}
	f.End = time.Now()
	if err != nil {
		f.Err = err.Error()
	}
	return f
}

// pause waits d, or less if ctx ends: a fault's own duration.
func pause(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func (s *soak) roll(ctx context.Context) (string, error) {
	for i, a := range s.cp.APIServers {
		if i > 0 {
			pause(ctx, 5*time.Second)
		}
		if err := a.Restart(ctx); err != nil {
			return "all", fmt.Errorf("restarting apiserver %d: %w", a.Index+1, err)
		}
	}
	return "all", nil
}

// killAPIServer SIGKILLs one apiserver and starts it 10 s later.
func (s *soak) killAPIServer(ctx context.Context) (string, error) {
	return s.oneAPIServer(ctx, (*harness.APIServer).Kill, 10*time.Second, (*harness.APIServer).Start)
}

// cutHost cuts one apiserver's host off the network for 30 s.
func (s *soak) cutHost(ctx context.Context) (string, error) {
	return s.oneAPIServer(ctx, (*harness.APIServer).Disconnect, 30*time.Second, func(a *harness.APIServer, _ context.Context) error { return a.Reconnect() })
}

// oneAPIServer takes an apiserver the seed picks down with off, and back
// with on d later.
func (s *soak) oneAPIServer(ctx context.Context, off func(*harness.APIServer) error, d time.Duration, on func(*harness.APIServer, context.Context) error) (string, error) {
	a := s.cp.APIServers[s.rng.IntN(len(s.cp.APIServers))]
	target := fmt.Sprintf("apiserver %d", a.Index+1)
	if err := off(a); err != nil {
		return target, err
	}
	pause(ctx, d)
	return target, on(a, ctx)
}

// soakAPFName names the soak's PriorityLevelConfiguration and FlowSchema;
// soakHogUser overloads the level, GETting soakHogObject.
const (
	soakAPFName   = "e2e-soak-reject"
	soakHogUser   = "e2e-soak-hog"
	soakHogObject = "soak-hog"
)

// apfOverload puts the resource requests of the soak user and of a hog
// user, for 30 s, in one priority level with no seats of its own, none to
// borrow, and rejection instead of queueing, and overloads it: the hog,
// directly, GETs a small ConfigMap from every apiserver without pause, 4
// at a time. APF still admits a request when none of the level is
// executing (a level of zero seats is slow, not dead), so without the hog
// the soak's few concurrent requests would pass one after the other; with
// it, the soak user's requests mostly meet a busy level and get 429.
// fanout's own /readyz probes, non-resource requests, stay in their usual
// level. The target names the rejections the apiservers counted.
func (s *soak) apfOverload(ctx context.Context) (string, error) {
	fc := s.cp.AdminClient.FlowcontrolV1()
	pl := &flowcontrolv1.PriorityLevelConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: soakAPFName},
		Spec: flowcontrolv1.PriorityLevelConfigurationSpec{
			Type: flowcontrolv1.PriorityLevelEnablementLimited,
			Limited: &flowcontrolv1.LimitedPriorityLevelConfiguration{
				NominalConcurrencyShares: ptr.To(int32(0)),
				LendablePercent:          ptr.To(int32(0)),
				BorrowingLimitPercent:    ptr.To(int32(0)),
				LimitResponse:            flowcontrolv1.LimitResponse{Type: flowcontrolv1.LimitResponseTypeReject},
			},
		},
	}
	if _, err := fc.PriorityLevelConfigurations().Create(ctx, pl, metav1.CreateOptions{}); err != nil {
		return s.user, err
	}
	fs := &flowcontrolv1.FlowSchema{
		ObjectMeta: metav1.ObjectMeta{Name: soakAPFName},
		Spec: flowcontrolv1.FlowSchemaSpec{
			PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: pl.Name},
			MatchingPrecedence:         500,
			DistinguisherMethod:        &flowcontrolv1.FlowDistinguisherMethod{Type: flowcontrolv1.FlowDistinguisherMethodByUserType},
			Rules: []flowcontrolv1.PolicyRulesWithSubjects{{
				Subjects: []flowcontrolv1.Subject{
					{Kind: flowcontrolv1.SubjectKindUser, User: &flowcontrolv1.UserSubject{Name: s.user}},
					{Kind: flowcontrolv1.SubjectKindUser, User: &flowcontrolv1.UserSubject{Name: soakHogUser}},
				},
				ResourceRules: []flowcontrolv1.ResourcePolicyRule{{
					Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}, Namespaces: []string{"*"},
				}},
			}},
		},
	}
	_, err := fc.FlowSchemas().Create(ctx, fs, metav1.CreateOptions{})
	if err == nil {
		hogCtx, stop := context.WithTimeout(ctx, 30*time.Second)
		var wg sync.WaitGroup
		for _, a := range s.cp.APIServers {
			cfg := rest.CopyConfig(s.hog)
			cfg.Host = a.URL
			cfg.QPS, cfg.Burst = -1, 0
			client, cerr := kubernetes.NewForConfig(cfg)
			if cerr != nil {
				err = cerr
				break
			}
			for range 4 {
				wg.Go(func() {
					for hogCtx.Err() == nil {
						if _, err := client.CoreV1().ConfigMaps(s.ns).Get(hogCtx, soakHogObject, metav1.GetOptions{}); err != nil {
							pause(hogCtx, 20*time.Millisecond)
						}
					}
				})
			}
		}
		<-hogCtx.Done()
		stop()
		wg.Wait()
	}
	if derr := removeSoakAPF(context.WithoutCancel(ctx), s.cp); derr != nil && err == nil {
		err = derr
	}
	var rejected float64
	for _, a := range s.cp.APIServers {
		n, merr := a.Metric(ctx, "apiserver_flowcontrol_rejected_requests_total", `priority_level="`+soakAPFName+`"`)
		if merr != nil && err == nil {
			err = merr
		}
		rejected += n
	}
	return fmt.Sprintf("%s (%.0f rejected)", s.user, rejected), err
}

// removeSoakAPF deletes the soak's APF objects, if there are any.
func removeSoakAPF(ctx context.Context, cp *harness.ControlPlane) error {
	fc := cp.AdminClient.FlowcontrolV1()
	err := fc.FlowSchemas().Delete(ctx, soakAPFName, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	err = fc.PriorityLevelConfigurations().Delete(ctx, soakAPFName, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}

// killSidecar SIGKILLs the fanout sidecar of the leading in-pod
// kube-controller-manager or kube-scheduler (in turn) through containerd,
// and waits until the kubelet has restarted it and it is ready.
func (s *soak) killSidecar(ctx context.Context) (string, error) {
	component := []string{"kube-controller-manager", "kube-scheduler"}[s.sidecarKills%2]
	s.sidecarKills++
	lease, err := s.cp.AdminClient.CoordinationV1().Leases("kube-system").Get(ctx, component, metav1.GetOptions{})
	if err != nil {
		return component, err
	}
	holder := ptr.Deref(lease.Spec.HolderIdentity, "")
	pods, err := s.cp.AdminClient.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "component=" + component})
	if err != nil {
		return component, err
	}
	var pod *corev1.Pod
	for i := range pods.Items {
		if p := &pods.Items[i]; strings.HasPrefix(holder, p.Name+"_") {
			pod = p
		}
	}
	if pod == nil {
		return component, fmt.Errorf("no pod of %s holds its lease (holder %q)", component, holder)
	}
	target := pod.Name + "/fanout"
	st := initStatus(pod, "fanout")
	if st == nil || st.ContainerID == "" {
		return target, fmt.Errorf("pod %s has no fanout sidecar running: %+v", pod.Name, st)
	}
	_, id, _ := strings.Cut(st.ContainerID, "://")
	out, err := exec.CommandContext(ctx, "ctr", "--address", s.e.node.ContainerdSocket, "--namespace", "k8s.io",
		"tasks", "kill", "--signal", "SIGKILL", id).CombinedOutput()
	if err != nil {
		return target, fmt.Errorf("ctr tasks kill %s: %w: %s", id, err, out)
	}
	restarts := st.RestartCount
	deadline := time.Now().Add(3 * time.Minute)
	for {
		p, err := s.cp.AdminClient.CoreV1().Pods("kube-system").Get(ctx, pod.Name, metav1.GetOptions{})
		if err == nil {
			if st := initStatus(p, "fanout"); st != nil && st.RestartCount > restarts && st.Ready {
				return target, nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return target, fmt.Errorf("the kubelet did not restart %s's fanout within 3 minutes (last error %v); pods:\n%s",
				pod.Name, err, s.cp.DescribePods(context.WithoutCancel(ctx), "kube-system"))
		}
		pause(ctx, 200*time.Millisecond)
	}
}

// rotate swaps, in turn, the host fanout's client certificate (a new one
// for the same user, in its secret volume) and every apiserver's serving
// certificate (a new one from the same CA), and waits until the new one
// is in use.
func (s *soak) rotate(ctx context.Context) (string, error) {
	s.rotations++
	dir := filepath.Join(s.dir, "rotated")
	if s.rotations%2 == 1 {
		before, err := s.sidecar.Metric("fanout_credential_reloads_total", map[string]string{"kind": "client", "result": "success"})
		if err != nil {
			return "client certificate", err
		}
		ck, err := harness.IssueClient(s.cp.PKI.CA, dir, fmt.Sprintf("client-%d", s.rotations), s.user)
		if err != nil {
			return "client certificate", err
		}
		if err := s.vol.Update(map[string][]byte{"tls.crt": ck.CertPEM, "tls.key": ck.KeyPEM}); err != nil {
			return "client certificate", err
		}
		for deadline := time.Now().Add(time.Minute); ; pause(ctx, 50*time.Millisecond) {
			v, err := s.sidecar.Metric("fanout_credential_reloads_total", map[string]string{"kind": "client", "result": "success"})
			if err == nil && v > before {
				return "client certificate", nil
			}
			if time.Now().After(deadline) {
				return "client certificate", fmt.Errorf("fanout did not reload its client certificate within a minute (%v, %v)", v, err)
			}
		}
	}
	ck, err := s.cp.PKI.IssueServing(s.cp.PKI.CA, dir, fmt.Sprintf("serving-%d", s.rotations))
	if err != nil {
		return "serving certificate", err
	}
	if err := s.cp.ServeCertificate(ck.CertPEM, ck.KeyPEM); err != nil {
		return "serving certificate", err
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return "serving certificate", s.cp.WaitServing(wctx, ck.Cert)
}

// restoreEnv leaves the real-node environment as the next test expects
// it, whatever state a fault was cut short in: every host connected,
// every apiserver running and ready, no APF objects of the soak.
func (s *soak) restoreEnv() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, a := range s.cp.APIServers {
		if err := a.Reconnect(); err != nil {
			s.t.Logf("reconnecting apiserver %d: %v", a.Index+1, err)
		}
	}
	for _, a := range s.cp.APIServers {
		if !a.Running() {
			if err := a.Start(ctx); err != nil {
				s.t.Errorf("starting apiserver %d again: %v", a.Index+1, err)
			}
		}
	}
	if err := removeSoakAPF(ctx, s.cp); err != nil {
		s.t.Errorf("removing the soak's APF objects: %v", err)
	}
}
