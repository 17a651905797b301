module kindling.dev/bench/goref

go 1.26
