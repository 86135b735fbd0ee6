package cuda
