import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, input_size, layer_sizes, output_size):
        super().__init__()
        layers, current = [], input_size
        for size in layer_sizes:  # same structure as the reference, so its state_dict loads
            layers += [nn.Linear(current, size), nn.ReLU()]
            current = size
        layers.append(nn.Linear(current, output_size))
        self.network = nn.Sequential(*layers)
        self.linears = [m for m in self.network if isinstance(m, nn.Linear)]

    def forward(self, x):
        for i, layer in enumerate(self.linears):
            x = cuda_extension.linear(x, layer.weight, layer.bias, i < len(self.linears) - 1)
        return x
