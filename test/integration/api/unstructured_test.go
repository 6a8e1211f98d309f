package api_test

import "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

func unstructuredFrom(obj map[string]interface{}) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: obj}
}
