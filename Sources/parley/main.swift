import Parley
print("parley")
