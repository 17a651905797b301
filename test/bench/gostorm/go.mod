module kindling.dev/bench/gostorm

go 1.26
