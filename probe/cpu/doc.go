package cpu
