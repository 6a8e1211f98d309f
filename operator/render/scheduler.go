package render

import (
	"fmt"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedconfig "github.com/slicer-operator/slicer/scheduler/config"
)

const schedulerConfigKey = "config.yaml"

// SchedulerConfig renders the KubeSchedulerConfiguration with the scheduler
// issue's renderer, in the form the apiserver minor's scheduler build reads.
func SchedulerConfig(o Options) ([]byte, error) {
	build, _, err := schedulerBuild(o)
	if err != nil {
		return nil, err
	}
	s := o.Slicer.Spec.Scheduler
	cfg, err := schedconfig.Render(schedconfig.Options{
		SchedulerName:     schedulerName(o),
		LeaderElect:       true,
		LeaseNamespace:    o.Namespace,
		LeaseName:         SchedulerName,
		SliceReadyTimeout: time.Duration(s.SliceReadyTimeoutSeconds) * time.Second,
		Defragmentation:   o.Slicer.Spec.Defragmentation.DeepCopy(),
	})
	if err != nil {
		return nil, fmt.Errorf("render scheduler configuration: %w", err)
	}
	return build.forMinor(cfg, o.Kubernetes.Minor)
}

func schedulerName(o Options) string {
	if n := o.Slicer.Spec.Scheduler.Name; n != "" {
		return n
	}
	return schedconfig.DefaultSchedulerName
}

func replicas(r int32) int32 {
	if r < 1 {
		return 2
	}
	return r
}

// Scheduler renders the scheduler's ServiceAccount, ConfigMap, Deployment
// and PodDisruptionBudget, with the build of the apiserver's minor; an error
// for a minor without one (SchedulerSupported). Leader election keeps one
// replica active; a new build rolls like any other template change.
func Scheduler(o Options) ([]client.Object, error) {
	image, err := SchedulerImage(o)
	if err != nil {
		return nil, err
	}
	cfg, err := SchedulerConfig(o)
	if err != nil {
		return nil, err
	}
	cm := &corev1.ConfigMap{
		TypeMeta:   typeMeta(corev1.SchemeGroupVersion.WithKind("ConfigMap")),
		ObjectMeta: metav1.ObjectMeta{Name: SchedulerConfigMap, Namespace: o.Namespace, Labels: labels(ComponentScheduler)},
		Data:       map[string]string{schedulerConfigKey: string(cfg)},
	}
	port := o.Ports.SchedulerSecure
	args := []string{
		"--config=/etc/slicer-scheduler/" + schedulerConfigKey,
		"--secure-port=" + strconv.Itoa(int(port)),
		"--feature-gates=" + schedconfig.FeatureGatesFlag(),
		"--v=2",
	}
	live := httpProbe("/livez", "https", schedulerProbeHost(o), corev1.URISchemeHTTPS)
	live.InitialDelaySeconds = 15
	if h := scrapeHost(o); h != "" {
		// kube-scheduler's secure serving, which serves /metrics (with
		// delegated authentication and authorization) and the health checks.
		args = append(args, "--bind-address="+h)
	}
	tlsMetrics, verified := metricsTLSOf(o, ComponentScheduler)
	if verified {
		args = append(args, schedulerCertArgs()...)
	}
	pod := corev1.PodSpec{
		ServiceAccountName: SchedulerName,
		SecurityContext:    restrictedPod(),
		HostNetwork:        o.hostNetwork(),
		Containers: []corev1.Container{{
			Name:            "scheduler",
			Image:           image,
			Env:             append(o.apiServerEnv(), hostIPEnvVars(o)...),
			Args:            args,
			Ports:           []corev1.ContainerPort{{Name: "https", ContainerPort: port, Protocol: corev1.ProtocolTCP}},
			LivenessProbe:   live,
			ReadinessProbe:  httpProbe("/readyz", "https", schedulerProbeHost(o), corev1.URISchemeHTTPS),
			Resources:       resources("100m", "128Mi"),
			SecurityContext: restrictedContainer(),
			VolumeMounts:    []corev1.VolumeMount{{Name: "config", MountPath: "/etc/slicer-scheduler", ReadOnly: true}},
		}},
		Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{
			ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: SchedulerConfigMap}},
		}}},
	}
	placeControlPlane(o, ComponentScheduler, &pod)
	if verified {
		mountMetricsCert(&pod, tlsMetrics)
	}
	if o.hostNetwork() {
		pod.DNSPolicy = corev1.DNSClusterFirstWithHostNet
	}
	n := replicas(o.Slicer.Spec.Scheduler.Replicas)
	objs := []client.Object{
		serviceAccount(o.Namespace, SchedulerName, ComponentScheduler),
		cm,
		deployment(o.Namespace, SchedulerName, ComponentScheduler, n, pod, hashOf(cfg)),
	}
	return appendPDB(objs, o.Namespace, SchedulerName, ComponentScheduler, n), nil
}

func deployment(namespace, name, component string, replicas int32, pod corev1.PodSpec, configHash string) *appsv1.Deployment {
	annotations := map[string]string{}
	if configHash != "" {
		annotations[ConfigHashAnnotation] = configHash
	}
	return &appsv1.Deployment{
		TypeMeta:   typeMeta(appsv1.SchemeGroupVersion.WithKind("Deployment")),
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels(component)},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: selectorLabels(component)},
			Strategy: appsv1.DeploymentStrategy{
				Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{
					MaxUnavailable: ptr.To(intstr.FromInt32(1)),
					MaxSurge:       ptr.To(intstr.FromInt32(0)),
				},
			},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels(component), Annotations: annotations},
				Spec:       pod,
			},
		},
	}
}

// appendPDB adds a PodDisruptionBudget keeping one pod up, only when there
// are two or more replicas (a PDB that forbids every eviction blocks drains).
func appendPDB(objs []client.Object, namespace, name, component string, replicas int32) []client.Object {
	if replicas < 2 {
		return objs
	}
	return append(objs, &policyv1.PodDisruptionBudget{
		TypeMeta:   typeMeta(policyv1.SchemeGroupVersion.WithKind("PodDisruptionBudget")),
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels(component)},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr.To(intstr.FromInt32(1)),
			Selector:     &metav1.LabelSelector{MatchLabels: selectorLabels(component)},
		},
	})
}
