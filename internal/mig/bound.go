package mig

type boundTable struct{}
